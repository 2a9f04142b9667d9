//go:build !goolm

package matrix

import (
	"context"
	"errors"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/heraldhq/herald/channels"
)

// EncryptionAvailable reports whether this binary can do end-to-end
// encryption: built with the goolm tag (crypto.go). This build cannot, and
// New refuses Options.Encryption.
const EncryptionAvailable = false

// UndecryptableText is the one line the bot answers a message it cannot
// decrypt with (crypto.go).
const UndecryptableText = "🔒 I could not decrypt your message: my device has no key for it. Please share your room keys with my device (or verify it), then send the message again."

type e2ee struct{}

var errNoOlm = errors.New("matrix: encryption: built without the goolm tag")

func (a *Adapter) startCrypto(context.Context, *mautrix.DefaultSyncer) error { return errNoOlm }

func (a *Adapter) cryptoFirstSync(context.Context, *mautrix.RespSync, bool) error { return errNoOlm }

func (a *Adapter) onEncrypted(context.Context, *event.Event) {}

func (a *Adapter) startKeyWaits(context.Context) {}

func (a *Adapter) stopCrypto(context.Context) {}

func (a *Adapter) cryptoChecks(context.Context) []channels.Check { return nil }

func (a *Adapter) freshTrust(context.Context, id.UserID, *id.Device) (id.TrustState, bool) {
	return id.TrustStateUnset, false
}

func (a *Adapter) decryptEarlier(context.Context, id.RoomID, *event.Event) *event.Event { return nil }
