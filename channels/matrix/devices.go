package matrix

import (
	"context"
	"strings"

	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"
)

// deviceDoubt is unverifiedDevice(evt), but for a command (text starting
// with "/", so an /approve) from a device its keys said was not verified,
// the sender's keys are read again from the homeserver first: a person who
// has just verified the device and answers at once is not refused because
// the device-list change is still on its way to the bot's /sync.
func (a *Adapter) deviceDoubt(ctx context.Context, evt *event.Event, text string) string {
	why := unverifiedDevice(evt)
	if why == "" || !strings.HasPrefix(strings.TrimSpace(text), "/") || evt.Mautrix.ForwardedKeys || evt.Mautrix.TrustSource == nil {
		return why
	}
	switch evt.Mautrix.TrustState {
	case id.TrustStateUnset, id.TrustStateCrossSignedUntrusted:
	default:
		return why // not a matter of stale keys
	}
	state, ok := a.freshTrust(ctx, evt.Sender, evt.Mautrix.TrustSource)
	if !ok {
		return why
	}
	again := *evt
	again.Mautrix.TrustState = state
	return unverifiedDevice(&again)
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
