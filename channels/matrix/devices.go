package matrix

import (
	"context"
	"strings"
	"time"

	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"
)

// freshTrustDeadline bounds the key query deviceDoubt makes: it runs on
// the /sync goroutine, so a slow homeserver must not stall it for long.
// Past it the stale answer stands (refused; the person sends /approve
// again).
const freshTrustDeadline = 3 * time.Second

// deviceDoubt is unverifiedDevice(evt), but for an /approve (the only
// command that reads Inbound.Unverified) from a device its keys said was
// not verified, the sender's keys are read again from the homeserver
// first, within freshTrustDeadline: a person who has just verified the
// device and answers at once is not refused because the device-list
// change is still on its way to the bot's /sync. Other messages and
// commands cost no key query.
func (a *Adapter) deviceDoubt(ctx context.Context, evt *event.Event, text string) string {
	why := unverifiedDevice(evt)
	if why == "" || !isApprove(text) || evt.Mautrix.ForwardedKeys || evt.Mautrix.TrustSource == nil {
		return why
	}
	switch evt.Mautrix.TrustState {
	case id.TrustStateUnset, id.TrustStateCrossSignedUntrusted:
	default:
		return why // not a matter of stale keys
	}
	ctx, cancel := context.WithTimeout(ctx, freshTrustDeadline)
	defer cancel()
	refetch := a.refetchTrust
	if refetch == nil {
		refetch = a.freshTrust
	}
	state, ok := refetch(ctx, evt.Sender, evt.Mautrix.TrustSource)
	if !ok {
		return why
	}
	again := *evt
	again.Mautrix.TrustState = state
	return unverifiedDevice(&again)
}

// isApprove reports whether text (its leading mention already removed) is
// an /approve command, as the gateway parses it: "/approve", any case,
// optionally "/approve@bot".
func isApprove(text string) bool {
	fields := strings.Fields(text)
	if len(fields) == 0 {
		return false
	}
	name, _, _ := strings.Cut(fields[0], "@")
	return strings.EqualFold(name, "/approve")
}

// unverifiedDevice says why the device that sent evt is not known to be a
// verified device of its sender, or "" when it is (Options.
// RequireVerifiedDevices, issue 35). Only an encrypted message names its
// device: the Megolm session it was decrypted with came, Olm-encrypted,
// from one device of the sender, and mautrix resolved that device's trust
// as it decrypted (evt.Mautrix.TrustState). A device counts as verified when
// its owner's self-signing key signed it under the master key first seen
// for the owner (what Element shows as a verified session), when the bot's
// own cross-signing trusts the owner, or when it was marked verified in
// the bot's key store. A stolen access token gives a new device, which
// nobody has signed.
func unverifiedDevice(evt *event.Event) string {
	if !evt.Mautrix.WasEncrypted {
		return "this room is not end-to-end encrypted, so the device a message came from cannot be checked"
	}
	dev := "your device"
	if d := evt.Mautrix.TrustSource; d != nil && d.DeviceID != "" {
		dev += " " + string(d.DeviceID)
	}
	if evt.Mautrix.ForwardedKeys {
		return "this message's key was forwarded by another device, so it cannot be tied to " + dev
	}
	switch evt.Mautrix.TrustState {
	case id.TrustStateVerified, id.TrustStateCrossSignedTOFU, id.TrustStateCrossSignedVerified:
		return ""
	case id.TrustStateCrossSignedUntrusted:
		return dev + " is signed by cross-signing keys other than the ones first seen for your account"
	case id.TrustStateBlacklisted:
		return dev + " is blocked"
	case id.TrustStateDeviceKeyMismatch:
		return "this message's keys do not match " + dev
	case id.TrustStateBackup:
		return "this message's key came from a key backup, so it cannot be tied to " + dev
	case id.TrustStateUnknownDevice, id.TrustStateForwarded:
		return "the device this message came from is unknown"
	}
	return dev + " is not verified; verify it from a session you already trust (Element: Settings → Sessions), then send /approve again"
}
