//go:build goolm

package matrix

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/crypto/attachment"
	"maunium.net/go/mautrix/event"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/matrix/matrixtest"
)

// TestDendriteEncryptedFiles: in an encrypted DM, a person's encrypted
// image (its bytes encrypted in the media repository, the key in the
// encrypted event) reaches the gateway and Open yields the plain bytes; a
// damaged ciphertext fails the read; the bot's file goes out encrypted
// (ciphertext in the repository, key in an encrypted event) and the person
// decrypts the same bytes.
func TestDendriteEncryptedFiles(t *testing.T) {
	hs := requireHS(t)
	alice := matrixtest.NewE2EE(t, hs.RegisterUser(t, "cfile-alice"))
	bot := hs.RegisterUser(t, "cfile-bot")
	a, in, _ := newCryptoBot(t, hs, bot, nil).start()
	room := alice.CreateEncryptedRoom(t, bot.UserID)
	alice.WaitMember(t, room, bot.UserID)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	img := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{9, 8, 7}, 4000)...)
	post := func(data []byte, damage bool) {
		ef := attachment.NewEncryptedFile()
		cipher := ef.Encrypt(data)
		if damage {
			cipher[len(cipher)/2] ^= 0xff
		}
		up, err := alice.Client.UploadMedia(ctx, mautrix.ReqUploadMedia{ContentBytes: cipher, ContentType: "application/octet-stream"})
		if err != nil {
			t.Fatal(err)
		}
		content := &event.MessageEventContent{MsgType: event.MsgImage, Body: "secret.png", FileName: "secret.png",
			Info: &event.FileInfo{MimeType: "image/png", Size: len(data)},
			File: &event.EncryptedFileInfo{EncryptedFile: *ef, URL: up.ContentURI.CUString()}}
		if _, err := alice.Client.SendMessageEvent(ctx, room, event.EventMessage, content); err != nil {
			t.Fatal(err)
		}
	}
	post(img, false)
	got := in.next(t)
	if len(got.Attachments) != 1 || got.Attachments[0].Kind != channels.KindImage {
		t.Fatalf("inbound %+v with %d attachments, want the encrypted image", got.Origin, len(got.Attachments))
	}
	if b, err := readAttachment(t, got.Attachments[0]); err != nil || !bytes.Equal(b, img) {
		t.Fatalf("decrypted %d bytes, %v; want the %d plain bytes", len(b), err, len(img))
	}
	post(img, true)
	if _, err := readAttachment(t, in.next(t).Attachments[0]); err == nil {
		t.Error("a damaged encrypted file was read without an error")
	}

	chart := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{1, 2}, 5000)...)
	if _, err := a.SendFile(ctx, got.Origin, channels.Message{ID: "c1", Part: 2, Text: "the chart", File: memFile("chart.png", "image/png", chart)}); err != nil {
		t.Fatalf("SendFile: %v", err)
	}
	msg := alice.WaitMessages(t, room, bot.UserID, 1, func(m matrixtest.Decrypted) bool { return m.Body() == "the chart" })[0]
	c := msg.Content.AsMessage()
	if !msg.Encrypted || c.File == nil || c.URL != "" {
		t.Fatalf("the bot's file: event encrypted %v, file key %v, clear url %q; want all encrypted", msg.Encrypted, c.File != nil, c.URL)
	}
	uri, err := c.File.URL.Parse()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := alice.Client.Download(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	cipher, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if bytes.Equal(cipher, chart) {
		t.Fatal("the media repository holds the bot's file in clear")
	}
	if err := c.File.DecryptInPlace(cipher); err != nil || !bytes.Equal(cipher, chart) {
		t.Errorf("the person decrypts %d bytes, %v; want the chart's %d", len(cipher), err, len(chart))
	}
}
