package web

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"
)

// beginStream registers an event stream unless the adapter has stopped.
func (a *Adapter) beginStream() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ctx.Err() != nil {
		return false
	}
	a.streams.Add(1)
	return true
}

// handleEvents serves GET /api/events: every entry after the resume point as
// "id: <seq>\ndata: <json>\n\n", then each new entry as it is appended,
// with comment heartbeats, until the client goes or the adapter stops.
// Last-Event-ID (sent by EventSource on reconnect) wins over ?after=.
func (a *Adapter) handleEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	client := q.Get("client")
	if !ValidClient(client) {
		writeError(w, http.StatusBadRequest, "client: "+ErrInvalidClient.Error())
		return
	}
	from, field := q.Get("after"), "after"
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		from, field = id, "Last-Event-ID"
	}
	last, err := parseSeq(from)
	if err != nil {
		writeError(w, http.StatusBadRequest, field+": "+err.Error())
		return
	}
	o, ok := a.ownershipFor(w, r, client, "the conversation could not be read; try again")
	if !ok || a.refuseClient(w, r, o, client) {
		return
	}
	if o == unclaimed && a.offLoopback(r) {
		// Off loopback a stream is opened by the browser that owns the
		// client, which it becomes by posting first.
		writeError(w, http.StatusForbidden, "client "+client+" has no clientSecret yet: post a message first, then open the stream with it")
		return
	}
	if why := a.slots.take(client); why != "" {
		w.Header().Set("Retry-After", "10")
		writeError(w, http.StatusTooManyRequests, why)
		return
	}
	defer a.slots.release(client)
	if !a.beginStream() {
		writeError(w, http.StatusServiceUnavailable, "the web chat is shutting down")
		return
	}
	defer a.streams.Done()

	// Subscribe before the first read so nothing appended in between is missed.
	sub, unsubscribe := a.hub.subscribe(client)
	defer unsubscribe()
	if a.opts.OnStream != nil {
		a.opts.OnStream(client)
	}

	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // a stream outlives the server's WriteTimeout
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write([]byte("retry: 2000\n: connected\n\n")); err != nil {
		return
	}
	if err := rc.Flush(); err != nil {
		a.log.Warn("web event stream cannot flush", zap.Error(err))
		return
	}

	log := a.log.With(zap.String("client", client))
	var buf bytes.Buffer
	// flush writes what buf holds.
	flush := func() bool {
		if buf.Len() == 0 {
			return true
		}
		_, err := w.Write(buf.Bytes())
		buf.Reset()
		return err == nil && rc.Flush() == nil
	}
	// put adds the entries to buf and advances last.
	put := func(entries []Entry) bool {
		for _, e := range entries {
			data, err := json.Marshal(withURLs(client, withHTML(e)))
			if err != nil {
				log.Error("web entry not encoded", zap.Int64("seq", e.Seq), zap.Error(err))
				return false
			}
			buf.WriteString("id: ")
			buf.WriteString(strconv.FormatInt(e.Seq, 10))
			buf.WriteString("\ndata: ")
			buf.Write(data)
			buf.WriteString("\n\n")
			last = e.Seq
		}
		return true
	}
	// send puts every entry after last into buf: the entries the wake-up
	// carried when they continue the stream (seqs last+1, last+2, …), else
	// read from the Log (a full batch is written out at once).
	send := func() bool {
		read := sub.entries.Swap(false)
		fresh := sub.take()
		for len(fresh) > 0 && fresh[0].Seq <= last {
			fresh = fresh[1:] // written already (read from the Log)
		}
		for i := range fresh {
			if fresh[i].Seq != last+1+int64(i) {
				read = true // a gap: an entry this process did not add
			}
		}
		if !read {
			return put(fresh)
		}
		for {
			entries, err := a.opts.Log.After(r.Context(), client, last, streamBatch)
			if err != nil {
				if r.Context().Err() == nil {
					log.Error("web event stream cannot read the conversation", zap.Int64("after", last), zap.Error(err))
				}
				return false
			}
			if !put(entries) {
				return false
			}
			if len(entries) < streamBatch {
				return true
			}
			if !flush() {
				return false
			}
		}
	}
	// sendLive puts the live state into buf when it changed: "event:
	// typing" with {"active": bool}, "event: delta" with {"text": the
	// reply so far} and "event: subagents" with {"runs": [...]} for the
	// panel. These events carry no id: they are not part of the
	// conversation. A wake-up's entries and live state go out in one
	// write.
	var shown liveState
	sendLive := func() {
		st := a.hub.liveOf(client)
		if st.typing != shown.typing {
			data, _ := json.Marshal(map[string]bool{"active": st.typing})
			buf.WriteString("event: typing\ndata: ")
			buf.Write(data)
			buf.WriteString("\n\n")
		}
		if st.draft != shown.draft && st.draft != "" {
			data, _ := json.Marshal(map[string]string{"text": st.draft})
			buf.WriteString("event: delta\ndata: ")
			buf.Write(data)
			buf.WriteString("\n\n")
		}
		if st.runs != shown.runs && st.runs != "" {
			buf.WriteString("event: subagents\ndata: ")
			buf.WriteString(st.runs)
			buf.WriteString("\n\n")
		}
		shown = st
	}
	update := func() bool {
		if !send() {
			return false
		}
		sendLive()
		return flush()
	}
	if !update() {
		return
	}
	heartbeat := time.NewTicker(a.opts.Heartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-a.streamsCtx.Done():
			return
		case <-sub.wake:
			if !update() {
				return
			}
		case <-heartbeat.C:
			if _, err := w.Write([]byte(": heartbeat\n\n")); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		}
	}
}
