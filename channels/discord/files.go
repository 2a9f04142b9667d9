package discord

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/bwmarrin/discordgo"

	"github.com/heraldhq/herald/channels"
)

// FileLimitBytes is Discord's upload limit for a bot in a server without
// boosts (10 MiB).
const FileLimitBytes = 10 << 20

var _ channels.FileSender = (*Adapter)(nil)

// cdnHosts are the hosts Discord serves attachments from; downloads go
// only there or to apiUrl's host (a self-hosted or fake Discord).
var cdnHosts = map[string]bool{"cdn.discordapp.com": true, "media.discordapp.net": true}

// attachments offers a message's files to the gateway's intake (SPEC §18);
// Open downloads from Discord's CDN, which needs no token.
func (a *Adapter) attachments(m *discordgo.Message) []channels.Attachment {
	var out []channels.Attachment
	for _, f := range m.Attachments {
		if f == nil {
			continue
		}
		at := channels.Attachment{Name: f.Filename, MIME: f.ContentType, Size: int64(f.Size), Kind: channels.KindOf(f.ContentType)}
		if m.Flags&discordgo.MessageFlagsIsVoiceMessage != 0 {
			at.Kind = channels.KindVoice
		}
		if at.Size <= 0 {
			at.Size = -1
		}
		link := f.URL
		if !a.allowedFileURL(link) {
			at.Err = fmt.Errorf("its address is not on Discord's CDN")
		} else {
			at.Open = func(ctx context.Context) (io.ReadCloser, error) { return a.download(ctx, link) }
		}
		out = append(out, at)
	}
	return out
}

func (a *Adapter) allowedFileURL(link string) bool {
	u, err := url.Parse(link)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") {
		return false
	}
	if cdnHosts[u.Hostname()] && u.Scheme == "https" {
		return true
	}
	api, err := url.Parse(a.opts.APIURL)
	return err == nil && u.Host == api.Host && u.Scheme == api.Scheme
}

func (a *Adapter) download(ctx context.Context, link string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, link, nil)
	if err != nil {
		return nil, err
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("download from Discord: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("Discord's CDN answered %s", resp.Status)
	}
	return resp.Body, nil
}

// FileLimit implements channels.FileSender.
func (a *Adapter) FileLimit() int64 { return FileLimitBytes }

// SendFile implements channels.FileSender: one message with the file
// (multipart, files[0]) and the caption as its text, into the origin's
// thread or channel, with a nonce from the outbox item and part and
// enforce_nonce, so a re-send returns the message already posted.
func (a *Adapter) SendFile(ctx context.Context, to channels.Origin, msg channels.Message) (string, error) {
	f := msg.File
	if f == nil || f.Open == nil {
		return "", fmt.Errorf("discord: send file to %s: no file: %w", to, channels.ErrPermanent)
	}
	if f.Size > FileLimitBytes {
		return "", fmt.Errorf("discord: %s is %d bytes, over Discord's %d: %w", f.Name, f.Size, FileLimitBytes, channels.ErrPermanent)
	}
	caption := msg.Text
	if r := []rune(caption); len(r) > Limit {
		caption = string(r[:Limit-1]) + "…"
	}
	name := f.Name
	if name == "" {
		name = "file"
	}
	rc, err := f.Open(ctx)
	if err != nil {
		return "", fmt.Errorf("discord: open %s: %w", name, err)
	}
	defer rc.Close()
	p := post{Content: caption, AllowedMentions: noMentions, Attachments: []map[string]any{{"id": 0, "filename": name}}}
	if key := firstOf(msg.ID, msg.RunID); key != "" {
		p.Nonce, p.EnforceNonce = nonce(key+"/file", msg.Part), true
	}
	// The multipart body holds the file once (discordgo builds it in memory;
	// FileLimit bounds it).
	ctype, body, err := discordgo.MultipartBodyWithJSON(p, []*discordgo.File{{Name: name, ContentType: f.MIME, Reader: io.LimitReader(rc, FileLimitBytes+1)}})
	if err != nil {
		return "", fmt.Errorf("discord: read %s: %w", name, err)
	}
	send := func() (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*sendTimeout)
		defer cancel()
		ep := discordgo.EndpointChannelMessages(target(to))
		resp, err := a.s.RequestRaw(http.MethodPost, ep, ctype, body, ep, 0, discordgo.WithContext(ctx))
		if err != nil {
			return "", err
		}
		var m discordgo.Message
		if err := discordgo.Unmarshal(resp, &m); err != nil {
			return "", fmt.Errorf("discord: undecodable message: %w", err)
		}
		return m.ID, nil
	}
	id, err := send()
	if err != nil && to.ThreadID != "" && isCode(err, codeUnknownChannel) {
		if terr := a.openThread(ctx, to); terr != nil {
			return "", terr
		}
		id, err = send()
	}
	if err != nil {
		return "", fmt.Errorf("discord: send %s to %s: %w", name, to, classify(a.redact(err)))
	}
	return id, nil
}
