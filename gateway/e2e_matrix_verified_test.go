//go:build goolm

package gateway_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/channels/matrix/matrixtest"
	"github.com/heraldhq/herald/gateway/command"
)

// TestE2EMatrixApprovalNeedsVerifiedDevice drives the whole gateway through
// Dendrite with channels.matrix.requireVerifiedDevices: in an encrypted DM,
// Alice's /approve from a device she has not verified is refused with the
// reason (the tool does not run, the request keeps waiting); once she
// verifies that device by cross-signing it with her own keys (what
// Element's "Verify this session" ends in), the same /approve from it
// lets the tool run.
func TestE2EMatrixApprovalNeedsVerifiedDevice(t *testing.T) {
	hs := matrixtest.Start(t)
	aliceClient := hs.RegisterUser(t, "alice")
	alice := matrixtest.NewE2EE(t, aliceClient)
	bot := hs.RegisterUser(t, "herald")
	llm := llmtest.NewAnthropic(t, approvalModel)
	dir := t.TempDir()
	src := fmt.Sprintf(matrixE2EEConfig, llm.URL, hs.URL, bot.UserID, bot.AccessToken)
	src = strings.Replace(src, "encryption: true }", "encryption: true, requireVerifiedDevices: true }", 1)
	src = strings.Replace(src, "channels: {", `security: { toolPolicy: { default: "allow", tools: { read_file: "supervised" } } },
  channels: {`, 1)
	runMatrixGateway(t, src, dir)
	ws := filepath.Join(dir, "workspace", "main")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "secret.txt"), []byte("the answer is 42"), 0o644); err != nil {
		t.Fatal(err)
	}

	room := alice.CreateEncryptedRoom(t, bot.UserID)
	alice.WaitMember(t, room, bot.UserID)
	// botSays waits for a message of the bot whose final text contains want.
	botSays := func(want string) string {
		t.Helper()
		var found string
		matrixtest.Eventually(t, fmt.Sprintf("a bot message with %q", want), func(ctx context.Context) (bool, error) {
			all, _, err := alice.Messages(ctx, room)
			if err != nil {
				return false, err
			}
			var mine []matrixtest.Decrypted
			for _, m := range all {
				if m.Sender == bot.UserID {
					mine = append(mine, m)
				}
			}
			for _, text := range finalTexts(mine) {
				if strings.Contains(text, want) {
					found = text
					return true, nil
				}
			}
			return false, nil
		})
		return found
	}

	alice.PostEncrypted(t, room, "", "please read the secret")
	m := approvalCode.FindStringSubmatch(botSays("🔐 Approval needed"))
	if m == nil {
		t.Fatal("the approval request has no code")
	}
	code := m[1]

	alice.PostEncrypted(t, room, "", "/approve "+code)
	refusal := botSays("⛔ Approvals are taken only from a verified device")
	if want := command.UnverifiedText("your device " + string(aliceClient.DeviceID) + " is not verified"); !strings.HasPrefix(refusal, strings.TrimSuffix(want, ".")) {
		t.Errorf("refusal = %q, want it to start %q", refusal, want)
	}
	if strings.Contains(refusal, "\n") {
		t.Errorf("the refusal is not one line: %q", refusal)
	}

	// Alice sets up cross-signing and signs this device with her
	// self-signing key; the bot learns it from the device-list change in
	// its /sync, or reads her keys again when the answer comes first.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var err error
	alice.WithoutSync(func() {
		if _, _, err = alice.Mach.GenerateAndUploadCrossSigningKeysWithPassword(ctx, matrixtest.Password(aliceClient.UserID.Localpart()), ""); err != nil {
			err = fmt.Errorf("alice sets up cross-signing: %w", err)
			return
		}
		if err = alice.Mach.SignOwnDevice(ctx, alice.Mach.OwnIdentity()); err != nil {
			err = fmt.Errorf("alice verifies her device: %w", err)
			return
		}
		if err = alice.Mach.SignOwnMasterKey(ctx); err != nil {
			err = fmt.Errorf("alice signs her master key: %w", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}

	alice.PostEncrypted(t, room, "", "/approve "+code)
	botSays("✅ Approved " + code)
	if reply := botSays("tool said:"); !strings.Contains(reply, "the answer is 42") {
		t.Errorf("the approved read_file did not run: %q", reply)
	}
}
