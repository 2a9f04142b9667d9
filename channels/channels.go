// Package channels holds the neutral types every chat channel shares: the
// Origin of a message, the Inbound event a channel pushes to the gateway, the
// outbound Message, the Channel interface and the splitting helpers.
//
// It must not know about agents, runs or the store: a channel adapter only
// decodes, verifies and sends.
package channels

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Name is a channel's name as it appears in session keys and config:
// "web", "slack", "telegram", "matrix".
type Name string

// Chat types used in requester session keys.
const (
	ChatDM    = "dm"
	ChatGroup = "group"
)

// Origin says where a requester message came from, and so where replies and
// announces must go: the same channel, account, chat and thread/topic.
type Origin struct {
	Channel  Name   `json:"channel"`
	Account  string `json:"account,omitempty"`  // bot/workspace account id, if the channel has several
	ChatID   string `json:"chatId"`             // Slack channel id, Telegram chat id, Matrix room id (a Matrix DM: the person's user id), web client id
	ChatType string `json:"chatType"`           // ChatDM or ChatGroup
	ThreadID string `json:"threadId,omitempty"` // Slack thread_ts, Telegram message_thread_id, Matrix thread root event id
	SenderID string `json:"senderId,omitempty"`
	// SenderName is the sender's display name where it is known; set on
	// the origin a turn's tools see, so an approval request can name the
	// person who may answer it.
	SenderName string `json:"senderName,omitempty"`
	// MessageID is the platform id of the message that asked (Slack ts,
	// Telegram message_id, Matrix event id); used for reply fallbacks.
	MessageID string `json:"messageId,omitempty"`
}

// String renders the origin for logs: channel:chatType:chatId[:thread:id].
func (o Origin) String() string {
	s := fmt.Sprintf("%s:%s:%s", o.Channel, o.ChatType, o.ChatID)
	if o.ThreadID != "" {
		s += ":thread:" + o.ThreadID
	}
	return s
}

// Inbound is one message from a person, decoded and already checked against
// the channel's allowFrom and group policy.
type Inbound struct {
	Origin     Origin
	SenderName string
	Text       string
	// Mentioned is true when the bot was addressed in a group (an @mention, a
	// reply to the bot, a thread the bot is in, or a slash command).
	Mentioned bool
	At        time.Time
	// Attachments are the files on the message, in the platform's order
	// (SPEC §18). Several files on one message stay one message.
	Attachments []Attachment
	// Unverified, when set, is why the device the message came from is not
	// known to be its sender's own verified device (Matrix with
	// requireVerifiedDevices): an /approve in it is refused with this
	// reason. Empty where the channel does not check devices.
	Unverified string
}

// Attachment kinds: what the platform says a file is. The gateway sniffs
// the real type from the content; Kind only decides voice transcription.
const (
	KindImage = "image"
	KindFile  = "file"
	KindAudio = "audio"
	KindVoice = "voice"
	KindVideo = "video"
)

// KindOf maps a MIME type, as the platform gives it, to an attachment kind
// by its top-level type: image/, audio/ and video/ are their own kinds, any
// other type is KindFile. It does not fold case.
func KindOf(mime string) string {
	switch {
	case strings.HasPrefix(mime, "image/"):
		return KindImage
	case strings.HasPrefix(mime, "audio/"):
		return KindAudio
	case strings.HasPrefix(mime, "video/"):
		return KindVideo
	}
	return KindFile
}

// Attachment is a file on an inbound message. The adapter fills the
// platform's metadata and Open; the gateway's intake streams the content to
// the store (maxBytes, maxFiles, a deadline, the type sniffed from the
// bytes) before the sink returns, i.e. before the platform is acknowledged.
// An adapter never downloads a file itself.
type Attachment struct {
	Name string // the file name the person gave ("" = the gateway names it)
	MIME string // the platform's claim; a hint only
	Size int64  // bytes the platform announced; -1 unknown
	Kind string // KindImage, KindFile, KindAudio, KindVoice, KindVideo
	// Open starts the download. ctx carries the intake's deadline; the
	// caller closes the reader. Open may be called again after a failure.
	Open func(ctx context.Context) (io.ReadCloser, error)
	// Err, when set, says the adapter could not offer this file at all
	// (e.g. the platform refused its metadata); the person is told
	// "📎 <name> was not read: <Err>."
	Err error
}

// OutFile is a file on an outbound message: an outbox part of its own
// (SPEC §18), sent after the text parts of the same message.
type OutFile struct {
	ID   string // the stored file's id (its SHA-256, hex)
	Name string
	MIME string // sniffed from the content
	Size int64
	// Open streams the content from the store; the caller closes it.
	Open func(ctx context.Context) (io.ReadCloser, error)
}

// FileSender is implemented by channels that can post files. The outbox
// checks FileLimit before sending and tells the person when a file is too
// large for the platform; SendFile posts one file (msg.File set, msg.Text
// the caption, possibly "") into msg's thread and returns the platform's id.
// Errors follow Send (*RetryAfterError, ErrPermanent). msg.ID and msg.Part
// identify the part, so a channel can derive an idempotency key from them.
type FileSender interface {
	FileLimit() int64 // the platform's upload limit in bytes; 0 = none known
	SendFile(ctx context.Context, to Origin, msg Message) (platformID string, err error)
}

// FileFinder is implemented by FileSenders that can look up whether a file
// part whose send outcome is unknown is already on the platform.
type FileFinder interface {
	FindFile(ctx context.Context, to Origin, msg Message) (platformID string, found bool, err error)
}

// Kind tells a channel what an outbound message is, so it can render it.
type Kind string

const (
	KindReply    Kind = "assistant"
	KindAnnounce Kind = "announce"
	KindSystem   Kind = "system" // command replies, approval requests, notices
)

// Message is one outbound message. Text may be longer than the platform's
// limit: the channel splits it with Split.
type Message struct {
	Kind  Kind
	Text  string
	RunID string // set for announces; channels that can, de-duplicate by it
	// ID is the outbox item's id: the same on every re-send of this
	// message, so a channel can derive idempotency keys from it (Matrix
	// transaction ids "herald-<ID>-<part>"). Empty when not from the outbox.
	ID string
	// Part and Parts number a part given to PartSender.SendPart (1-based).
	Part, Parts int
	// DraftRef is the platform id of a draft of this message (a Drafter's
	// ref): the first part replaces the draft instead of being posted.
	DraftRef string
	// File is set on a file part given to FileSender.SendFile; Text is
	// then the file's caption.
	File *OutFile
}

// PartSender is implemented by channels whose messages the outbox splits
// and sends one part at a time, recording each part and its platform id,
// so a restart resumes after the last part sent (SPEC §12). The channel
// then only speaks its platform: no splitting, no progress of its own.
type PartSender interface {
	// PartLimit is the platform's message size limit in characters.
	PartLimit() int
	// SendPart posts one part (msg.Text fits PartLimit) and returns the
	// platform's id of the posted message ("" if it gives none).
	SendPart(ctx context.Context, to Origin, msg Message) (platformID string, err error)
}

// PartFinder is implemented by channels that can look up whether a part
// whose send outcome is unknown (the process died during the send) is
// already on the platform, so it is not posted twice.
type PartFinder interface {
	FindPart(ctx context.Context, to Origin, msg Message) (platformID string, found bool, err error)
}

// Sink receives inbound messages. The gateway owns it; a channel calls it
// from its receive loop and never calls an agent itself. When it returns
// nil the message is stored (SPEC §12 durable intake) and the channel may
// acknowledge it to the platform; an error wrapping ErrBusy (see *BusyError)
// or ErrDraining means it was not taken, and the person has been told; one
// wrapping ErrUnavailable means it was not taken and must not be acked.
type Sink func(ctx context.Context, in Inbound) error

// ErrBusy: the gateway has more work queued than its cap; try again later.
var ErrBusy = errors.New("the gateway is busy")

// ErrDraining: the gateway is shutting down and takes no new messages.
var ErrDraining = errors.New("the gateway is shutting down")

// ErrUnavailable: the gateway cannot store messages now (its state store is
// unreachable); the message was not taken and must not be acknowledged, so
// the platform delivers it again. See *UnavailableError.
var ErrUnavailable = errors.New("the gateway cannot store messages right now")

// UnavailableError is ErrUnavailable with how long to wait before trying
// again and why.
type UnavailableError struct {
	RetryAfter time.Duration
	Reason     string
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("%v (%s); try again in %s", ErrUnavailable, e.Reason, e.RetryAfter)
}

func (e *UnavailableError) Unwrap() error { return ErrUnavailable }

// BusyError is ErrBusy with how long to wait before trying again.
type BusyError struct {
	RetryAfter time.Duration
	Reason     string
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("%v (%s); try again in %s", ErrBusy, e.Reason, e.RetryAfter)
}

func (e *BusyError) Unwrap() error { return ErrBusy }

// Channel is one chat platform.
type Channel interface {
	Name() Name
	// Start connects and begins delivering inbound messages to sink. It
	// returns once the channel is running (or failed to start); receive
	// loops run until ctx is cancelled or Stop is called.
	Start(ctx context.Context, sink Sink) error
	// Send posts msg to the origin's chat and thread. An error wrapping
	// *RetryAfterError asks the caller to wait; ErrPermanent says a retry
	// cannot help.
	Send(ctx context.Context, to Origin, msg Message) error
	Stop(ctx context.Context) error
}

// Healther is implemented by channels that can report their connection
// health for /readyz. A nil error means healthy.
type Healther interface {
	Health() error
}

// ErrPermanent marks a send error that retrying will not fix (bad chat id,
// bot removed from the chat, message rejected).
var ErrPermanent = errors.New("permanent channel error")

// RetryAfterError is returned by Send when the platform rate-limited the
// request and said how long to wait.
type RetryAfterError struct {
	After time.Duration
	Err   error
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("rate limited, retry after %s: %v", e.After, e.Err)
}

func (e *RetryAfterError) Unwrap() error { return e.Err }

// Split cuts text into parts of at most limit characters (runes), breaking on
// line boundaries where it can. If the text ends with a stats line (a last
// line starting with "Stats:"), that line is kept whole and in the last part.
func Split(text string, limit int) []string {
	if limit <= 0 || runeLen(text) <= limit {
		return []string{text}
	}
	body, stats := text, ""
	if i := strings.LastIndexByte(text, '\n'); i >= 0 && strings.HasPrefix(text[i+1:], "Stats:") && runeLen(text[i+1:]) <= limit {
		body, stats = text[:i], text[i+1:]
	}
	var parts []string
	var cur strings.Builder
	curLen := 0
	flush := func() {
		if curLen > 0 {
			parts = append(parts, strings.TrimRight(cur.String(), "\n"))
			cur.Reset()
			curLen = 0
		}
	}
	for _, line := range strings.SplitAfter(body, "\n") {
		for runeLen(line) > limit { // a single line longer than the limit
			flush()
			r := []rune(line)
			parts = append(parts, string(r[:limit]))
			line = string(r[limit:])
		}
		if n := runeLen(line); curLen+n > limit {
			flush()
		}
		cur.WriteString(line)
		curLen += runeLen(line)
	}
	if stats != "" {
		if curLen > 0 && curLen+1+runeLen(stats) <= limit {
			cur.WriteString("\n")
			cur.WriteString(stats)
			curLen += 1 + runeLen(stats)
		} else {
			flush()
			cur.WriteString(stats)
			curLen = runeLen(stats)
		}
	}
	flush()
	return parts
}

func runeLen(s string) int { return len([]rune(s)) }

// HTTPMounter is implemented by channels that receive over the gateway's HTTP
// listener (Slack Events API, Telegram webhook, the web chat). The gateway
// mounts each handler at its pattern (http.ServeMux syntax, e.g.
// "POST /slack/events") before it starts listening.
type HTTPMounter interface {
	Routes() map[string]http.Handler
}
