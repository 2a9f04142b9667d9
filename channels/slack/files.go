package slack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/heraldhq/herald/channels"
)

// FileLimitBytes is Slack's upload limit: 1 GB per file.
const FileLimitBytes = 1 << 30

// maxCaption bounds the caption block of an uploaded file (Slack's limit
// for a rich-text block's text is 4000 characters).
const maxCaption = 3000

var (
	_ channels.FileSender = (*Adapter)(nil)
	_ channels.FileFinder = (*Adapter)(nil)
)

// attachments describes the files of a message for the gateway's intake.
// Nothing is downloaded here: each Open fetches url_private_download with
// the bot token when the intake asks for it.
func (a *Adapter) attachments(files []slack.File) []channels.Attachment {
	var out []channels.Attachment
	for _, f := range files {
		at := channels.Attachment{Name: f.Name, MIME: f.Mimetype, Size: int64(f.Size), Kind: fileKind(f)}
		if at.Name == "" {
			at.Name = f.Title
		}
		if f.Size <= 0 {
			at.Size = -1
		}
		link := f.URLPrivateDownload
		if link == "" {
			link = f.URLPrivate
		}
		switch {
		case f.Mode == "hidden_by_limit":
			at.Err = errors.New("Slack hides it (the workspace is over its free plan's file history)")
		case f.Mode == "tombstone":
			at.Err = errors.New("it was deleted")
		case f.IsExternal || f.Mode == "external":
			at.Err = errors.New("it is stored outside Slack (" + orUnknown(f.ExternalType) + ")")
		case link == "":
			at.Err = errors.New("Slack gave no download link (does the app have the files:read scope?)")
		default:
			at.Open = a.opener(link)
		}
		out = append(out, at)
	}
	return out
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// fileKind maps Slack's file to an attachment kind; Slack's MIME type is
// matched without regard to case.
func fileKind(f slack.File) string {
	return channels.KindOf(strings.ToLower(f.Mimetype))
}

// opener returns the Open of a file at link: a GET with the bot token as a
// Bearer header, streamed; the body is the file. The token goes only to an
// https Slack host or to the configured API URL's host.
func (a *Adapter) opener(link string) func(ctx context.Context) (io.ReadCloser, error) {
	return func(ctx context.Context) (io.ReadCloser, error) {
		u, err := url.Parse(link)
		if err != nil {
			return nil, fmt.Errorf("Slack's file link is not a URL: %w", err)
		}
		if !a.mayReceiveToken(u) {
			return nil, fmt.Errorf("its link is not on a Slack host (%s), so the bot token is not sent there", u.Host)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, link, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+a.opts.BotToken)
		resp, err := a.httpClient().Do(req)
		if err != nil {
			return nil, fmt.Errorf("download from Slack: %w", redactURL(err))
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fmt.Errorf("Slack answered the download with HTTP %d", resp.StatusCode)
		}
		// Without access Slack redirects to the workspace's sign-in page
		// (an HTML page with the file's path in redir) instead of an error.
		if final := resp.Request; final != nil && final.URL.Path != u.Path && final.URL.Query().Get("redir") != "" {
			resp.Body.Close()
			return nil, errors.New("Slack sent its sign-in page instead: the bot token cannot read this file (is the app in the channel, with files:read?)")
		}
		return resp.Body, nil
	}
}

// mayReceiveToken: an https host under slack.com (files.slack.com), or the
// scheme and host of the configured API URL (a fake or a proxy the
// operator chose, which gets the token with every call anyway).
func (a *Adapter) mayReceiveToken(u *url.URL) bool {
	host := strings.ToLower(u.Hostname())
	if u.Scheme == "https" && (host == "slack.com" || strings.HasSuffix(host, ".slack.com")) {
		return true
	}
	api, err := url.Parse(a.opts.APIURL)
	return err == nil && api.Host != "" && u.Scheme == api.Scheme && strings.EqualFold(u.Host, api.Host)
}

func (a *Adapter) httpClient() *http.Client {
	if a.opts.HTTPClient != nil {
		return a.opts.HTTPClient
	}
	return http.DefaultClient
}

// redactURL drops the URL from a *url.Error: a Slack file link names the
// workspace and file, which logs need not carry.
func redactURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// FileLimit implements channels.FileSender: Slack takes files up to 1 GB.
func (a *Adapter) FileLimit() int64 { return FileLimitBytes }

// fileMarker is the block_id of the caption block of an uploaded file: it
// names the outbox item and part (SPEC §12), invisibly, so FindFile can
// tell whether a share whose answer was lost is in the channel.
func fileMarker(msg channels.Message) string {
	if msg.ID == "" {
		return ""
	}
	return fmt.Sprintf("herald-%s-%d", msg.ID, msg.Part)
}

// SendFile implements channels.FileSender with Slack's files.uploadV2
// flow: files.getUploadURLExternal, the bytes streamed to the upload URL,
// then files.completeUploadExternal into the origin's channel and thread.
// The share carries one rich-text block (the caption, or the file name)
// whose block_id names the outbox item and part. The platform id is the
// Slack file id.
func (a *Adapter) SendFile(ctx context.Context, to channels.Origin, msg channels.Message) (string, error) {
	f := msg.File
	switch {
	case f == nil || f.Open == nil:
		return "", fmt.Errorf("slack send file: no file: %w", channels.ErrPermanent)
	case to.ChatID == "":
		return "", fmt.Errorf("slack send file: origin has no chat id: %w", channels.ErrPermanent)
	case f.Size <= 0:
		return "", fmt.Errorf("slack send file %q: Slack does not take empty files: %w", f.Name, channels.ErrPermanent)
	case f.Size > FileLimitBytes:
		return "", fmt.Errorf("slack send file %q: %d bytes is over Slack's 1 GB: %w", f.Name, f.Size, channels.ErrPermanent)
	}
	name := f.Name
	if name == "" {
		name = "file"
	}
	up, err := a.api.GetUploadURLExternalContext(ctx, slack.GetUploadURLExternalParameters{FileName: name, FileSize: int(f.Size)})
	if err != nil {
		return "", classifySlack("files.getUploadURLExternal", err)
	}
	rc, err := f.Open(ctx)
	if err != nil {
		return "", fmt.Errorf("slack send file %q: open: %w", name, err)
	}
	err = a.api.UploadToURL(ctx, slack.UploadToURLParameters{UploadURL: up.UploadURL, Reader: rc, Filename: name})
	rc.Close()
	if err != nil {
		return "", classifySlack("upload of "+name, err)
	}
	caption := strings.TrimSpace(msg.Text)
	if caption == "" {
		caption = name
	}
	if r := []rune(caption); len(r) > maxCaption {
		caption = string(r[:maxCaption-1]) + "…"
	}
	block := slack.NewRichTextBlock(fileMarker(msg),
		slack.NewRichTextSection(slack.NewRichTextSectionTextElement(caption, nil)))
	_, err = a.api.CompleteUploadExternalContext(ctx, slack.CompleteUploadExternalParameters{
		Files:           []slack.FileSummary{{ID: up.FileID, Title: name}},
		Channel:         to.ChatID,
		ThreadTimestamp: to.ThreadID,
		Blocks:          slack.Blocks{BlockSet: []slack.Block{block}},
	})
	if err != nil {
		return "", classifySlack("files.completeUploadExternal", err)
	}
	if to.ThreadID != "" {
		a.threads.add(to.ChatID + "/" + to.ThreadID)
	}
	return up.FileID, nil
}

// FindFile implements channels.FileFinder: it looks through the thread (or
// the channel's recent history) for a file share of the bot whose block
// names this outbox item and part, and returns its file id.
func (a *Adapter) FindFile(ctx context.Context, to channels.Origin, msg channels.Message) (string, bool, error) {
	marker := fileMarker(msg)
	if marker == "" {
		return "", false, nil
	}
	var msgs []slack.Message
	if to.ThreadID != "" {
		replies, _, _, err := a.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
			ChannelID: to.ChatID, Timestamp: to.ThreadID, Limit: 200})
		if err != nil {
			return "", false, classifySlack("conversations.replies", err)
		}
		msgs = replies
	} else {
		hist, err := a.api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{ChannelID: to.ChatID, Limit: 200})
		if err != nil {
			return "", false, classifySlack("conversations.history", err)
		}
		msgs = hist.Messages
	}
	for _, m := range msgs {
		if len(m.Files) == 0 {
			continue
		}
		for _, b := range m.Blocks.BlockSet {
			if b.ID() == marker {
				return m.Files[0].ID, true, nil
			}
		}
	}
	return "", false, nil
}

// classifySlack maps a Slack API error to the outbox's retry semantics: a
// rate limit → *channels.RetryAfterError; an error no retry can fix →
// channels.ErrPermanent; anything else stays transient.
func classifySlack(op string, err error) error {
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) {
		return &channels.RetryAfterError{After: max(rl.RetryAfter, time.Second), Err: fmt.Errorf("%s: %w", op, err)}
	}
	var se slack.SlackErrorResponse
	if errors.As(err, &se) && (permanentErrors[se.Err] || permanentFileErrors[se.Err]) {
		return fmt.Errorf("%s: %w: %w", op, err, channels.ErrPermanent)
	}
	return fmt.Errorf("%s: %w", op, redactURL(err))
}

// permanentFileErrors are file upload errors a retry cannot fix.
var permanentFileErrors = map[string]bool{
	"file_uploads_disabled":               true,
	"file_uploads_except_images_disabled": true,
	"invalid_channel":                     true,
	"posting_to_general_channel_denied":   true,
}
