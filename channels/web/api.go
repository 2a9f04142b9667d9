package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/media"
)

// postRequest is the body of POST /api/messages.
type postRequest struct {
	Client string `json:"client"`
	Text   string `json:"text"`
	// Files are base64 files (SPEC §18); multipart/form-data posts send
	// "file" parts instead.
	Files []jsonFile `json:"files"`
}

// postResponse is the 202 answer to POST /api/messages.
type postResponse struct {
	SessionKey string `json:"sessionKey"`
	Seq        int64  `json:"seq"`
	// ClientSecret is returned by the first post of a new client (SPEC
	// §17): later requests for the client carry it.
	ClientSecret string `json:"clientSecret,omitempty"`
}

type listResponse struct {
	Messages []Entry `json:"messages"`
}

type sessionResponse struct {
	Client     string `json:"client"`
	SessionKey string `json:"sessionKey"`
	// Owner says whose the client's conversation is: "you" (the request
	// carries its secret), "other" (another browser's) or "none" (no post
	// yet). SecretRequired: off loopback, only "you" may read it.
	Owner          string `json:"owner"`
	SecretRequired bool   `json:"secretRequired"`
}

type errorResponse struct {
	Error string `json:"error"`
}

var crossOrigin = http.NewCrossOriginProtection()

// guard wraps h with the token check (api; the page itself holds no data)
// and, for unsafe methods, the cross-origin check, so a page on another
// site cannot post into a chat.
func (a *Adapter) guard(api bool, h http.Handler) http.Handler {
	g := Guard{Token: a.opts.Token, OffLoopback: a.opts.OffLoopback}
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, msg := g.Check(r)
		if status == http.StatusUnauthorized && !api {
			status = 0 // the page asks for the token itself
		}
		if status != 0 {
			if status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="herald"`)
			}
			writeError(w, status, msg)
			return
		}
		h.ServeHTTP(w, r)
	})
	return crossOrigin.Handler(inner)
}

func (a *Adapter) handlePage(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("Content-Length", strconv.Itoa(len(pageHTML)))
	_, _ = w.Write(pageHTML)
}

// unavailableRetry is what a client is asked to wait when its message
// could not be stored.
const unavailableRetry = 5 * time.Second

// storeUnavailable answers a request the gateway's store could not serve
// (an outage): 503 with Retry-After; nothing was taken.
func storeUnavailable(w http.ResponseWriter) {
	w.Header().Set("Retry-After", strconv.Itoa(int(unavailableRetry/time.Second)))
	writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("the message could not be stored (the gateway's state store is unreachable); try again in %d s", int(unavailableRetry/time.Second)))
}

// uploadSlot takes one of the MaxUploads slots for a post with files,
// waiting up to the upload wait for one (its body unread meanwhile);
// false when none came, or MaxUploadWaiters wait already.
func (a *Adapter) uploadSlot(r *http.Request) bool {
	select {
	case a.uploads <- struct{}{}:
		return true
	default:
	}
	if a.uploadWaiters.Add(1) > MaxUploadWaiters {
		a.uploadWaiters.Add(-1)
		return false
	}
	defer a.uploadWaiters.Add(-1)
	wait := a.opts.UploadWait
	if wait <= 0 {
		wait = DefaultUploadWait
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case a.uploads <- struct{}{}:
		return true
	case <-t.C:
	case <-r.Context().Done():
	}
	return false
}

// errRefused: the post was refused (its answer written) while its body
// was read.
var errRefused = errors.New("post refused")

// admitPost checks a post's client: a valid id, its owner (SPEC §17) and
// the rate limits, per client and per remote address. A refusal is
// answered here.
func (a *Adapter) admitPost(w http.ResponseWriter, r *http.Request, client string) (ownership, bool) {
	if !ValidClient(client) {
		writeError(w, http.StatusBadRequest, "client: "+ErrInvalidClient.Error())
		return stranger, false
	}
	o, err := a.ownershipOf(r, client)
	if err != nil {
		a.log.Error("web client secret not read", zap.String("client", client), zap.Error(err))
		storeUnavailable(w)
		return o, false
	}
	if a.refuseClient(w, r, o, client) {
		return o, false
	}
	now := time.Now().UTC()
	ok, wait := a.limits.allow(client, now)
	if ok && a.addrLimits != nil {
		ok, wait = a.addrLimits.allow(remoteIP(r), now)
	}
	if !ok {
		if a.opts.OnRateLimited != nil {
			a.opts.OnRateLimited(client)
		}
		secs := max(1, int((wait+time.Second-1)/time.Second))
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("client %s is sending too fast (channels.web.rateLimit allows %d a minute, %d at once); try again in %d s",
			client, a.opts.RateLimit.PerMinute, max(a.opts.RateLimit.Burst, 1), secs))
		return o, false
	}
	return o, true
}

func (a *Adapter) handlePost(w http.ResponseWriter, r *http.Request) {
	sink, ok := a.runningSink()
	if !ok {
		writeError(w, http.StatusServiceUnavailable, "the web chat is not running; try again when the gateway has started")
		return
	}
	var req postRequest
	// A post's files: a body carrying them may be as large as they are
	// allowed to be (base64 in JSON takes a third more).
	bodyLimit := int64(maxBodyBytes)
	multipart := isMultipart(r)
	if a.opts.Files != nil && (multipart || r.ContentLength < 0 || r.ContentLength > maxBodyBytes) {
		// A post that may carry files: refused before its body is read
		// when the disk is nearly full, and at most MaxUploads at once.
		if a.opts.UploadsRefused != nil {
			if why := a.opts.UploadsRefused(); why != "" {
				writeError(w, http.StatusInsufficientStorage, why)
				return
			}
		}
		if !a.uploadSlot(r) {
			w.Header().Set("Retry-After", "2")
			writeError(w, http.StatusTooManyRequests, fmt.Sprintf("%d posts with files are being read now (the web chat's limit); try again in 2 s", cap(a.uploads)))
			return
		}
		defer func() { <-a.uploads }()
	}
	// Access and rate limits are checked once the client is known and
	// before any file is read: the multipart client field must come
	// before the files; a JSON body (one file's worth, in memory) before
	// its files are spooled.
	var o ownership
	admitted := false
	admit := func(client string) bool {
		if admitted {
			return true
		}
		var ok bool
		o, ok = a.admitPost(w, r, client)
		admitted = ok
		return ok
	}
	switch {
	case a.opts.Files != nil && multipart:
		bodyLimit += int64(a.maxFiles()+1) * (a.maxFileBytes()/3*4 + 4<<10)
	case a.opts.Files != nil:
		// The JSON form is held in memory while it is decoded (the base64
		// text, then the bytes): one maxBytes file's worth in all, so a
		// post costs what one file does; larger ones go as multipart,
		// which streams.
		bodyLimit += a.maxFileBytes()/3*4 + int64(a.maxFiles()+1)*(4<<10)
	}
	body := http.MaxBytesReader(w, r.Body, bodyLimit)
	form := &postForm{}
	defer func() { form.cleanup() }()
	tooLarge := func(err error) bool {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			msg := fmt.Sprintf("request body is larger than %d bytes", bodyLimit)
			if !multipart && a.opts.Files != nil {
				msg += "; a JSON body carries one attachments.maxBytes file's worth in all: send larger files as multipart/form-data"
			}
			writeError(w, http.StatusRequestEntityTooLarge, msg)
			return true
		}
		return false
	}
	if multipart && a.opts.Files != nil {
		r.Body = body
		mr, err := r.MultipartReader()
		if err != nil {
			writeError(w, http.StatusBadRequest, "multipart body: "+err.Error())
			return
		}
		f, status, err := a.readMultipart(r, mr, admit)
		form = f
		if errors.Is(err, errRefused) {
			return // admit answered
		}
		if err != nil {
			if !tooLarge(err) {
				writeError(w, status, err.Error())
			}
			return
		}
		req.Client, req.Text = form.Client, form.Text
	} else {
		dec := json.NewDecoder(body)
		if err := dec.Decode(&req); err != nil {
			if tooLarge(err) {
				return
			}
			writeError(w, http.StatusBadRequest, "body must be a JSON object {\"client\": \"<id>\", \"text\": \"<message>\"}: "+err.Error())
			return
		}
		if dec.More() {
			writeError(w, http.StatusBadRequest, "body must be a single JSON object")
			return
		}
		if len(req.Files) > 0 {
			if a.opts.Files == nil {
				writeError(w, http.StatusBadRequest, "files: this web chat takes no files")
				return
			}
			if !admit(req.Client) {
				return
			}
			if status, err := a.readJSONFiles(form, req.Files); err != nil {
				writeError(w, status, err.Error())
				return
			}
			req.Files = nil // the spool holds them now
		}
	}
	if strings.TrimSpace(req.Text) == "" && len(form.uploads) == 0 {
		writeError(w, http.StatusBadRequest, "text is empty")
		return
	}
	if len(req.Text) > MaxTextBytes {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("text is %d bytes; the limit is %d bytes (32 KiB)", len(req.Text), MaxTextBytes))
		return
	}
	if !admit(req.Client) {
		return
	}
	now := time.Now().UTC()
	// Off loopback a new client is claimed by its first post: the secret
	// is made and stored before the message, so two first posts cannot
	// both own it. On loopback the API stays as it was: no secrets.
	var secret string
	if o == unclaimed && a.offLoopback(r) {
		// A conversation from before client secrets is never handed to
		// whoever posts first: anyone who saw its id (it was in page
		// addresses) could take over its history, session and workspace.
		old, err := a.opts.Log.After(r.Context(), req.Client, 0, 1)
		if err != nil {
			a.log.Error("web history not read", zap.String("client", req.Client), zap.Error(err))
			writeError(w, http.StatusInternalServerError, "the message could not be stored; try again")
			return
		}
		if len(old) > 0 {
			writeError(w, http.StatusForbidden, legacyClient(req.Client))
			return
		}
		secret = newClientSecret()
		claimed, err := a.secrets.ClaimSecret(r.Context(), req.Client, hashSecret(secret))
		if err != nil {
			a.log.Error("web client secret not stored", zap.String("client", req.Client), zap.Error(err))
			storeUnavailable(w)
			return
		}
		if !claimed {
			// Another request claimed it just now.
			if a.refuseClient(w, r, stranger, req.Client) {
				return
			}
			secret = ""
		} else {
			a.setCookie(w, r, clientCookiePrefix+req.Client, secret)
		}
	}
	e := &Entry{Role: RoleUser, Text: req.Text, At: now}
	var atts []channels.Attachment
	for _, u := range form.uploads {
		atts = append(atts, u.attachment())
		if !u.tooBig && u.id != "" {
			e.Files = append(e.Files, File{ID: u.id, Name: media.SafeName(u.name, u.mime), MIME: u.mime, Size: u.size})
		}
	}
	in := channels.Inbound{
		Origin: channels.Origin{
			Channel:  Name,
			ChatID:   req.Client,
			ChatType: channels.ChatDM,
			SenderID: req.Client,
		},
		SenderName:  req.Client,
		Text:        req.Text,
		Mentioned:   true,
		At:          now,
		Attachments: atts,
	}
	// The gateway stores the message as owed before it answers (SPEC §12):
	// only then is it acknowledged with 202. It runs on the adapter's
	// context, so a client that hangs up does not cancel it. The entry is
	// stored first, or in the same transaction (IntakeLog).
	seq, err := a.take(a.ctx, sink, req.Client, e, in)
	if errors.Is(err, errNotStored) {
		// The state store did not take it (an outage): nothing was
		// acknowledged; the client sends it again.
		a.log.Error("web message not stored", zap.String("client", req.Client), zap.Error(err))
		storeUnavailable(w)
		return
	}
	sessionKey := a.opts.SessionKey(req.Client)
	a.log.Debug("web message received", zap.String("client", req.Client), zap.Int64("seq", seq), zap.String("sessionKey", sessionKey))
	var busy *channels.BusyError
	var unavailable *channels.UnavailableError
	switch {
	case err == nil:
		writeJSON(w, http.StatusAccepted, postResponse{SessionKey: sessionKey, Seq: seq, ClientSecret: secret})
	case errors.As(err, &busy):
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(busy.RetryAfter.Round(time.Second)/time.Second))))
		writeError(w, http.StatusTooManyRequests, err.Error())
	case errors.As(err, &unavailable):
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(unavailable.RetryAfter.Round(time.Second)/time.Second))))
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case errors.Is(err, channels.ErrDraining):
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, err.Error()+"; try again in a few seconds")
	default:
		a.log.Error("web message not taken", zap.String("client", req.Client), zap.Error(err))
		writeError(w, http.StatusInternalServerError, "the message could not be stored; try again")
	}
}

func (a *Adapter) handleList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	client := q.Get("client")
	if !ValidClient(client) {
		writeError(w, http.StatusBadRequest, "client: "+ErrInvalidClient.Error())
		return
	}
	after, err := parseSeq(q.Get("after"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "after: "+err.Error())
		return
	}
	limit := maxPageEntries
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxPageEntries {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit must be a whole number from 1 to %d", maxPageEntries))
			return
		}
		limit = n
	}
	o, ok := a.ownershipFor(w, r, client, "the conversation could not be read; try again")
	if !ok || a.refuseClient(w, r, o, client) {
		return
	}
	entries, err := a.opts.Log.After(r.Context(), client, after, limit)
	if err == nil && o == unclaimed && a.offLoopback(r) && len(entries) > 0 {
		// A conversation from before client secrets: shown to no one off
		// loopback, and not claimable there (handlePost).
		writeError(w, http.StatusForbidden, legacyClient(client))
		return
	}
	if err != nil {
		a.log.Error("web history not read", zap.String("client", client), zap.Error(err))
		w.Header().Set("Retry-After", strconv.Itoa(int(unavailableRetry/time.Second)))
		writeError(w, http.StatusServiceUnavailable, "the conversation could not be read (the gateway's state store is unreachable); try again")
		return
	}
	if entries == nil {
		entries = []Entry{}
	}
	for i := range entries {
		entries[i] = withURLs(client, withHTML(entries[i]))
	}
	writeJSON(w, http.StatusOK, listResponse{Messages: entries})
}

func (a *Adapter) handleSession(w http.ResponseWriter, r *http.Request) {
	client := r.URL.Query().Get("client")
	if !ValidClient(client) {
		writeError(w, http.StatusBadRequest, "client: "+ErrInvalidClient.Error())
		return
	}
	o, ok := a.ownershipFor(w, r, client, "the client could not be looked up; try again")
	if !ok {
		return
	}
	owner := map[ownership]string{unclaimed: "none", owner: "you", stranger: "other", wrong: "other"}[o]
	writeJSON(w, http.StatusOK, sessionResponse{Client: client, SessionKey: a.opts.SessionKey(client), Owner: owner, SecretRequired: a.offLoopback(r)})
}

// parseSeq parses an after= value or a Last-Event-ID; empty is 0.
func parseSeq(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a sequence number (a whole number ≥ 0)", s)
	}
	return n, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"response could not be encoded"}`)
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorResponse{Error: msg})
}

// legacyClient is the refusal of a conversation that has history from
// before client secrets but no clientSecret, off loopback.
func legacyClient(client string) string {
	return "client " + client + " has history from before client secrets and no clientSecret, so it cannot be read or claimed off loopback " +
		"(anyone who knows its id could take it over); start a new conversation (a new client id). " +
		"Its history stays readable on loopback only: on the gateway's machine, at a loopback gateway.http.listen without gateway.http.behindProxy, " +
		"open http://127.0.0.1:<port>/?client=" + client
}
