package harness

import (
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
)

// The scripted fake model speaks the OpenAI Chat Completions wire format
// (streamed or not) and answers by what the user said:
//
//	SAY <tag>          → "ack <tag>"
//	SPAWN <n> <tag>    → n sessions_spawn calls labelled <tag>.1 … <tag>.n,
//	                     then "spawned <tag>"
//	SENDBACK <name>    → with attachments/<name> named in the message: a
//	                     send_file call for it (caption "back: <name>"),
//	                     then "sent <name>"; without: "no file <name>"
//
// A sub-agent answers "<label> result" and its announce step
// "Result:\n<label> done\n\nNotes:\n(none)". Every answer waits Latency.
var (
	sayRe      = regexp.MustCompile(`^SAY (\S+)$`)
	sendBackRe = regexp.MustCompile(`(?m)^SENDBACK (\S+)$`)
	spawnRe    = regexp.MustCompile(`^SPAWN (\d+) (\S+)$`)
	labelRe    = regexp.MustCompile(`(?m)^- Label: (\S+)$`)
	announceRe = regexp.MustCompile(`(?m)^Task: (\S+)$`)
)

// ModelOptions shapes the fake model.
type ModelOptions struct {
	Latency time.Duration // every answer waits this long
	// FailEvery makes every n-th call answer HTTP 500 (0: never), so the
	// gateway's retries are part of the run.
	FailEvery int
	// StreamDelay is waited between the pieces of a streamed answer.
	StreamDelay time.Duration
	// TLS serves HTTPS with HTTP/2, as the real providers do (one
	// connection carries many calls), with a self-signed certificate
	// written to Model.CertFile; a gateway trusts it through
	// Model.Env (SSL_CERT_FILE). Without it: clear-text HTTP/1.1.
	TLS bool
}

// Model is a running scripted fake model.
type Model struct {
	URL string // the OpenAI base URL (…/v1)

	// CertFile is the PEM certificate of a TLS model (ModelOptions.TLS).
	CertFile string

	opts       ModelOptions
	srv        *http.Server
	tls        *httptest.Server
	certDir    string
	done       chan struct{}
	calls      atomic.Int64
	failed     atomic.Int64
	firstSpawn atomic.Int64 // unix nanos of the first spawn answer

	mu       sync.Mutex
	spawned  map[string]int // tag → spawn calls answered (more than one answer = a repeated turn)
	sentBack map[string]int // file name → send_file calls answered
	arrived  map[CallKind][]time.Time
	answered map[CallKind][]time.Time // when the handler returned: the answer written
	kinds    map[string]CallKind      // by callIDHeader, until the answer is written
	nextID   atomic.Int64
}

// callIDHeader is set on each call as it comes in, so that the time its
// answer was written is counted under the kind answer gave it.
const callIDHeader = "X-Herald-Load-Call"

// timed records when each call's answer was written (Answered).
func (m *Model) timed(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strconv.FormatInt(m.nextID.Add(1), 10)
		r.Header.Set(callIDHeader, id)
		h.ServeHTTP(w, r)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		at := time.Now()
		m.mu.Lock()
		if kind, ok := m.kinds[id]; ok {
			m.answered[kind] = append(m.answered[kind], at)
			delete(m.kinds, id)
		}
		m.mu.Unlock()
	})
}

// Answered returns when each answer of kind was written, in order.
func (m *Model) Answered(kind CallKind) []time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.answered[kind])
}

// CallKind sorts the model's calls for a timeline.
type CallKind string

// The kinds of call a timeline counts.
const (
	CallSpawn    CallKind = "parent spawn"   // a SPAWN message's first call (answered with the spawn calls)
	CallAfter    CallKind = "parent after"   // the call after the spawn calls' results
	CallWork     CallKind = "child work"     // a sub-agent's work turn
	CallAnnounce CallKind = "child announce" // a sub-agent's announce step
	CallOther    CallKind = "other"
	connKind     CallKind = "connection" // not a call: a TLS connection accepted (Connections)
)

// Connections returns when each connection to a TLS model was accepted.
func (m *Model) Connections() []time.Time { return m.Arrivals(connKind) }

// Arrivals returns when each call of kind reached the model (its handler
// had the request), in order of arrival. The answer left Latency later.
func (m *Model) Arrivals(kind CallKind) []time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.arrived[kind])
}

// StartModel serves the fake model on a loopback port.
func StartModel(opts ModelOptions) (*Model, error) {
	m := &Model{opts: opts, done: make(chan struct{}), spawned: map[string]int{}, sentBack: map[string]int{}, arrived: map[CallKind][]time.Time{}, kinds: map[string]CallKind{}, answered: map[CallKind][]time.Time{}}
	handler := m.timed(llmtest.NewHandler(llmtest.APIOpenAI, m.answer, false))
	if opts.TLS {
		return m, m.startTLS(handler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	m.URL = "http://" + ln.Addr().String() + "/v1"
	m.srv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(m.done)
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Printf("fake model: %v\n", err)
		}
	}()
	return m, nil
}

// startTLS serves h over HTTPS with HTTP/2 (httptest's certificate, for
// 127.0.0.1) and writes the certificate to CertFile.
func (m *Model) startTLS(h http.Handler) error {
	dir, err := os.MkdirTemp("", "herald-model-cert-")
	if err != nil {
		return err
	}
	m.tls = httptest.NewUnstartedServer(h)
	m.tls.EnableHTTP2 = true
	m.tls.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			m.mu.Lock()
			m.arrived[connKind] = append(m.arrived[connKind], time.Now())
			m.mu.Unlock()
		}
	}
	m.tls.Config.ReadHeaderTimeout = 10 * time.Second
	m.tls.StartTLS()
	m.certDir, m.CertFile = dir, filepath.Join(dir, "model.pem")
	m.URL = m.tls.URL + "/v1"
	close(m.done)
	pemCert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.tls.Certificate().Raw})
	if err := os.WriteFile(m.CertFile, pemCert, 0o600); err != nil {
		m.Close()
		return err
	}
	return nil
}

// Env is what a gateway process needs in its environment to call the
// model: for a TLS model, SSL_CERT_FILE naming its certificate (Go's
// crypto/x509 then trusts it, and only it, as the system's roots).
func (m *Model) Env() []string {
	if m.CertFile == "" {
		return nil
	}
	return []string{"SSL_CERT_FILE=" + m.CertFile}
}

// Close stops the server, cutting calls that still wait.
func (m *Model) Close() {
	if m.tls != nil {
		_ = m.tls.Config.Close() // cut calls still waiting, then wait for their handlers
		m.tls.Close()
		os.RemoveAll(m.certDir)
		return
	}
	_ = m.srv.Close()
	<-m.done
}

// Latency is what every answer waits.
func (m *Model) Latency() time.Duration { return m.opts.Latency }

// Calls is how many calls the model received; Failed how many it answered 500.
func (m *Model) Calls() int64  { return m.calls.Load() }
func (m *Model) Failed() int64 { return m.failed.Load() }

// FirstSpawn is when the model first answered with spawn calls (zero if never).
func (m *Model) FirstSpawn() time.Time {
	n := m.firstSpawn.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// SpawnAnswers returns how many times the model answered SPAWN for tag with
// spawn calls: 1 normally, more when a turn was run again after a crash.
func (m *Model) SpawnAnswers(tag string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.spawned[tag]
}

// SendBackAnswers returns how many times the model answered SENDBACK for
// the file name with a send_file call: 1 normally, more when a turn was run
// again.
func (m *Model) SendBackAnswers(name string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sentBack[name]
}

func (m *Model) answer(c llmtest.Call) llmtest.Reply {
	at := time.Now()
	n := m.calls.Add(1)
	r, kind := m.reply(c)
	m.mu.Lock()
	m.arrived[kind] = append(m.arrived[kind], at)
	if id := c.Header.Get(callIDHeader); id != "" {
		m.kinds[id] = kind
	}
	m.mu.Unlock()
	if m.opts.FailEvery > 0 && n%int64(m.opts.FailEvery) == 0 {
		m.failed.Add(1)
		r = llmtest.Reply{Status: http.StatusInternalServerError, Message: "fake model: injected failure"}
	}
	r.Delay = m.opts.Latency
	r.StreamDelay = m.opts.StreamDelay
	return r
}

func (m *Model) reply(c llmtest.Call) (llmtest.Reply, CallKind) {
	var last agent.Message
	if len(c.Messages) > 0 {
		last = c.Messages[len(c.Messages)-1]
	}
	if strings.Contains(c.System, "Sub-agent context") {
		label := "?"
		if mm := labelRe.FindStringSubmatch(c.System); mm != nil {
			label = mm[1]
		}
		if last.Role == agent.RoleUser && strings.Contains(last.Text, "Announce step") {
			return llmtest.Reply{Text: fmt.Sprintf("Result:\n%s done\n\nNotes:\n(none)", label)}, CallAnnounce
		}
		return llmtest.Reply{Text: label + " result"}, CallWork
	}
	user := strings.TrimSpace(c.LastUser())
	if mm := spawnRe.FindStringSubmatch(user); mm != nil {
		if last.Role == agent.RoleTool {
			return llmtest.Reply{Text: "spawned " + mm[2]}, CallAfter
		}
		n, _ := strconv.Atoi(mm[1])
		calls := make([]agent.ToolCall, n)
		for i := range calls {
			label := fmt.Sprintf("%s.%d", mm[2], i+1)
			args, _ := json.Marshal(map[string]string{"task": "work item " + label, "label": label})
			calls[i] = agent.ToolCall{Name: "sessions_spawn", Args: args}
		}
		m.firstSpawn.CompareAndSwap(0, time.Now().Add(m.opts.Latency).UnixNano())
		m.mu.Lock()
		m.spawned[mm[2]]++
		m.mu.Unlock()
		return llmtest.Reply{Text: "Spawning " + mm[2] + ".", ToolCalls: calls}, CallSpawn
	}
	if mm := sendBackRe.FindStringSubmatch(user); mm != nil {
		name := mm[1]
		switch {
		case last.Role == agent.RoleTool:
			return llmtest.Reply{Text: "sent " + name}, CallOther
		case !strings.Contains(user, "[file: attachments/"+name+" "):
			return llmtest.Reply{Text: "no file " + name}, CallOther
		}
		m.mu.Lock()
		m.sentBack[name]++
		m.mu.Unlock()
		args, _ := json.Marshal(map[string]string{"path": "attachments/" + name, "caption": "back: " + name})
		return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "send_file", Args: args}}}, CallOther
	}
	if mm := sayRe.FindStringSubmatch(user); mm != nil {
		return llmtest.Reply{Text: "ack " + mm[1]}, CallOther
	}
	return llmtest.Reply{Text: "ack"}, CallOther
}

// AnnouncedLabel returns the label of a sub-agent announce ("" if the text
// is not one).
func AnnouncedLabel(text string) string {
	if mm := announceRe.FindStringSubmatch(text); mm != nil {
		return mm[1]
	}
	return ""
}
