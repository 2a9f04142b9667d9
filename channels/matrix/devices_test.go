package matrix

import (
	"strings"
	"testing"

	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/config"
)

// TestUnverifiedDevice: with requireVerifiedDevices, only a message
// decrypted from a device its owner cross-signed (or the bot verified)
// may approve; every other case names why, in one line.
func TestUnverifiedDevice(t *testing.T) {
	dev := &id.Device{UserID: "@alice:example.org", DeviceID: "PHONE"}
	for _, tc := range []struct {
		name string
		info event.MautrixInfo
		want string // "" = may approve; else a part of the reason
	}{
		{"cross-signed by its owner", event.MautrixInfo{WasEncrypted: true, TrustState: id.TrustStateCrossSignedTOFU, TrustSource: dev}, ""},
		{"owner verified by the bot", event.MautrixInfo{WasEncrypted: true, TrustState: id.TrustStateCrossSignedVerified, TrustSource: dev}, ""},
		{"verified in the key store", event.MautrixInfo{WasEncrypted: true, TrustState: id.TrustStateVerified, TrustSource: dev}, ""},
		{"not verified", event.MautrixInfo{WasEncrypted: true, TrustState: id.TrustStateUnset, TrustSource: dev}, "your device PHONE is not verified; verify it"},
		{"owner's keys changed", event.MautrixInfo{WasEncrypted: true, TrustState: id.TrustStateCrossSignedUntrusted, TrustSource: dev}, "other than the ones first seen"},
		{"forwarded key", event.MautrixInfo{WasEncrypted: true, TrustState: id.TrustStateCrossSignedTOFU, TrustSource: dev, ForwardedKeys: true}, "forwarded by another device"},
		{"key from backup", event.MautrixInfo{WasEncrypted: true, TrustState: id.TrustStateBackup}, "key backup"},
		{"unknown device", event.MautrixInfo{WasEncrypted: true, TrustState: id.TrustStateUnknownDevice}, "unknown"},
		{"keys do not match", event.MautrixInfo{WasEncrypted: true, TrustState: id.TrustStateDeviceKeyMismatch, TrustSource: dev}, "do not match"},
		{"blocked", event.MautrixInfo{WasEncrypted: true, TrustState: id.TrustStateBlacklisted, TrustSource: dev}, "blocked"},
		{"unencrypted room", event.MautrixInfo{}, "not end-to-end encrypted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := unverifiedDevice(&event.Event{Sender: dev.UserID, Mautrix: tc.info})
			switch {
			case tc.want == "" && got != "":
				t.Errorf("refused: %q", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("reason = %q, want it to say %q", got, tc.want)
			case strings.Contains(got, "\n"):
				t.Errorf("reason is not one line: %q", got)
			}
		})
	}
}

// TestRequireVerifiedDevicesNeedsEncryption: only an encrypted message
// names its device, so the key without encryption is a config error naming
// its path.
func TestRequireVerifiedDevicesNeedsEncryption(t *testing.T) {
	src := `{ channels: { matrix: { enabled: true, homeserver: "https://matrix.example.org", userId: "@herald:example.org",
	  accessToken: "t", requireVerifiedDevices: true } } }`
	cfg, err := config.Parse("matrix.json5", []byte(src), func(string) (string, bool) { return "", false })
	if err == nil {
		err = cfg.Validate()
	}
	if err == nil || !strings.Contains(err.Error(), "channels.matrix.requireVerifiedDevices") || !strings.Contains(err.Error(), "encryption") {
		t.Fatalf("requireVerifiedDevices without encryption: %v; want an error naming the key and encryption", err)
	}
}
