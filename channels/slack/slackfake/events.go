package slackfake

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"
)

var eventSeq atomic.Int64

// MentionEvent is an app_mention inner event.
func MentionEvent(channel, user, text, ts, threadTS string) map[string]any {
	e := map[string]any{"type": "app_mention", "channel": channel, "user": user, "text": text, "ts": ts, "event_ts": ts}
	if threadTS != "" {
		e["thread_ts"] = threadTS
	}
	return e
}

// MessageEvent is a message inner event; channelType is "im", "channel",
// "group" or "mpim".
func MessageEvent(channelType, channel, user, text, ts, threadTS string) map[string]any {
	e := map[string]any{"type": "message", "channel": channel, "channel_type": channelType, "user": user, "text": text, "ts": ts, "event_ts": ts}
	if threadTS != "" {
		e["thread_ts"] = threadTS
	}
	return e
}

// EventCallback wraps an inner event in the Events API outer envelope
// (type event_callback, team TeamID) and returns its JSON.
func EventCallback(event map[string]any) []byte {
	n := eventSeq.Add(1)
	b, _ := json.Marshal(map[string]any{
		"token":      "legacy-verification-token",
		"team_id":    TeamID,
		"api_app_id": AppID,
		"type":       "event_callback",
		"event_id":   fmt.Sprintf("Ev%08d", n),
		"event_time": time.Now().Unix(),
		"event":      event,
	})
	return b
}

// URLVerification is the challenge Slack posts when the request URL is set.
func URLVerification(challenge string) []byte {
	b, _ := json.Marshal(map[string]any{"token": "legacy-verification-token", "challenge": challenge, "type": "url_verification"})
	return b
}

// SlashCommand is a slash command payload as Socket Mode sends it.
func SlashCommand(channel, user, command, text string) map[string]string {
	name := "general"
	if channelType(channel) == "im" {
		name = "directmessage"
	}
	return map[string]string{
		"token": "legacy-verification-token", "team_id": TeamID, "team_domain": "herald-test",
		"channel_id": channel, "channel_name": name, "user_id": user, "user_name": "alice",
		"command": command, "text": text, "api_app_id": AppID,
		"response_url": "https://hooks.slack.com/commands/fake", "trigger_id": "1.2.fake",
	}
}

// SlashCommandForm is a slash command as the form-encoded body Slack posts
// in http mode.
func SlashCommandForm(channel, user, command, text string) []byte {
	v := url.Values{}
	for k, s := range SlashCommand(channel, user, command, text) {
		v.Set(k, s)
	}
	return []byte(v.Encode())
}

// Sign returns the X-Slack-Signature value for body sent at ts.
func Sign(secret string, ts time.Time, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "v0:%d:", ts.Unix())
	mac.Write(body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// NewSignedRequest builds a POST of body to target signed with secret as
// of at. contentType is "application/json" for events and
// "application/x-www-form-urlencoded" for slash commands.
func NewSignedRequest(target, secret, contentType string, body []byte, at time.Time) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("X-Slack-Request-Timestamp", strconv.FormatInt(at.Unix(), 10))
	req.Header.Set("X-Slack-Signature", Sign(secret, at, body))
	return req, nil
}

// PostEvent signs an Events API payload with secret, posts it to target
// now, and returns the response (the caller closes its body).
func PostEvent(target, secret string, payload []byte) (*http.Response, error) {
	req, err := NewSignedRequest(target, secret, "application/json", payload, time.Now())
	if err != nil {
		return nil, err
	}
	return http.DefaultClient.Do(req)
}

// PostSlashCommand signs a form-encoded slash command and posts it.
func PostSlashCommand(target, secret string, form []byte) (*http.Response, error) {
	req, err := NewSignedRequest(target, secret, "application/x-www-form-urlencoded", form, time.Now())
	if err != nil {
		return nil, err
	}
	return http.DefaultClient.Do(req)
}
