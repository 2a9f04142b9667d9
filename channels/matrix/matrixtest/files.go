package matrixtest

import (
	"context"
	"io"
	"net/http"
	"testing"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"
)

// PostFile uploads data to the media repository as c and posts it to room
// (in the thread rooted at root when not empty) as a message of type
// msgType (m.image, m.file, m.audio, m.video) the way Element does: the
// file name in filename, the caption (if any) as the body, else the file
// name. mentions go into m.mentions.user_ids. It returns the event id and
// the mxc:// URI.
func PostFile(t testing.TB, c *mautrix.Client, room id.RoomID, root id.EventID, msgType event.MessageType,
	name, mimeType string, data []byte, caption string, mentions ...id.UserID) (id.EventID, id.ContentURI) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	up, err := c.UploadMedia(ctx, mautrix.ReqUploadMedia{ContentBytes: data, ContentType: mimeType, FileName: name})
	if err != nil {
		t.Fatalf("%s uploads %s: %v", c.UserID, name, err)
	}
	content := &event.MessageEventContent{MsgType: msgType, Body: name, FileName: name, URL: up.ContentURI.CUString(),
		Info: &event.FileInfo{MimeType: mimeType, Size: len(data)}}
	if caption != "" {
		content.Body = caption
	}
	if len(mentions) > 0 {
		content.Mentions = &event.Mentions{UserIDs: mentions}
	}
	if root != "" {
		content.RelatesTo = &event.RelatesTo{Type: event.RelThread, EventID: root, IsFallingBack: true,
			InReplyTo: &event.InReplyTo{EventID: root}}
	}
	resp, err := c.SendMessageEvent(ctx, room, event.EventMessage, content)
	if err != nil {
		t.Fatalf("%s posts %s in %s: %v", c.UserID, name, room, err)
	}
	return resp.EventID, up.ContentURI
}

// Download fetches an mxc:// URI through the authenticated media API as c.
func Download(t testing.TB, c *mautrix.Client, uri id.ContentURIString) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	parsed, err := uri.Parse()
	if err != nil {
		t.Fatalf("media URI %q: %v", uri, err)
	}
	resp, err := c.Download(ctx, parsed)
	if err != nil {
		t.Fatalf("download %s: %v", uri, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("download %s: HTTP %d", uri, resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("download %s: %v", uri, err)
	}
	return b
}
