package matrix

import (
	"errors"

	"github.com/heraldhq/herald/channels"
)

// CryptoDB is the database the device's keys are kept in (Options.CryptoDB):
// a handle on the gateway's state database, its dialect ("sqlite" or
// "postgres"), and what to run when the adapter stops with it.
type CryptoDB = channels.SQLDB

// checkEncryption validates the encryption options (New).
func checkEncryption(opts Options) error {
	if opts.RecoveryKey != "" && !opts.Encryption {
		return errors.New("matrix: recoveryKey is set but encryption is off: set encryption: true or remove recoveryKey")
	}
	if opts.RequireVerifiedDevices && !opts.Encryption {
		return errors.New("matrix: requireVerifiedDevices needs encryption: only an encrypted message names the device that sent it")
	}
	if !opts.Encryption {
		return nil
	}
	if !EncryptionAvailable {
		return errors.New("matrix: encryption: this binary was built without the goolm tag (go build -tags goolm), so it has no Olm implementation")
	}
	return nil
}

// deviceForLogin is the device a password login asks for: the configured
// deviceId, else, with encryption, a fixed one, so that the keys the state
// database holds stay the device's across restarts.
func (a *Adapter) deviceForLogin() string {
	if a.opts.DeviceID == "" && a.opts.Encryption {
		return "HERALD"
	}
	return a.opts.DeviceID
}
