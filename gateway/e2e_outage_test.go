package gateway_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/devtools/pgtest"
	"github.com/heraldhq/herald/store"
)

// outageModel answers every message with "answer to: <text>" after a
// short think, so turns are in flight when the store goes away.
func outageModel(c llmtest.Call) llmtest.Reply {
	return llmtest.Reply{Text: "answer to: " + c.LastUser(), Delay: 50 * time.Millisecond}
}

const outageConfig = `{
  gateway: { http: { listen: "127.0.0.1:0" } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "m" }] } } },
  agents: { defaults: { model: "anthropic/m", maxConcurrent: 8 } },
  channels: { web: { enabled: true, rateLimit: { perMinute: -1 } } },
  state: { leaseSeconds: 60 },
}`

// outageLoad posts perClient messages from each of clients web clients,
// one after the other per client, while outage runs; a 503 (the store is
// away, Retry-After) is sent again after a moment. The first half of each
// client's messages goes before the outage, the rest from its start on. It returns the texts
// acknowledged with 202.
func outageLoad(t *testing.T, base string, clients, perClient int, outage func(begun func())) map[string][]string {
	t.Helper()
	var mu sync.Mutex
	acked := map[string][]string{}
	refused := 0
	var wg sync.WaitGroup
	half := make(chan struct{})
	var halfOnce sync.Once
	var sent sync.WaitGroup
	sent.Add(clients)
	for c := range clients {
		client := fmt.Sprintf("c%02d", c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perClient {
				if i == perClient/2 {
					sent.Done()
					<-half
				}
				text := fmt.Sprintf("%s-m%02d", client, i)
				body, _ := json.Marshal(map[string]string{"client": client, "text": text})
				deadline := time.Now().Add(2 * e2eWait)
				for {
					resp, err := http.Post(base+"/api/messages", "application/json", bytes.NewReader(body))
					if err != nil {
						t.Errorf("POST %s: %v", text, err)
						return
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusAccepted {
						mu.Lock()
						acked[client] = append(acked[client], text)
						mu.Unlock()
						break
					}
					if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
						t.Errorf("POST %s: %s %s; want 202, or 503 with Retry-After while the store is away", text, resp.Status, b)
						return
					}
					mu.Lock()
					refused++
					mu.Unlock()
					if time.Now().After(deadline) {
						t.Errorf("POST %s still refused after %s: %s", text, 2*e2eWait, b)
						return
					}
					time.Sleep(50 * time.Millisecond) // a client honouring Retry-After, faster
				}
			}
		}()
	}
	go func() {
		sent.Wait()                                            // every client has messages acknowledged and in flight
		outage(func() { halfOnce.Do(func() { close(half) }) }) // the rest is sent during the outage
		halfOnce.Do(func() { close(half) })
	}()
	wg.Wait()
	t.Logf("%d messages acknowledged; %d posts refused with 503 during the outage", count(acked), refused)
	return acked
}

// answers counts the assistant messages of web clients c00 … c<n-1>
// (-1 while a conversation cannot be read).
func answers(base string, n int) int {
	total := 0
	for c := range n {
		resp, err := http.Get(fmt.Sprintf("%s/api/messages?client=c%02d&after=0", base, c))
		if err != nil {
			return -1
		}
		var out struct{ Messages []webEntry }
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			return -1
		}
		for _, m := range out.Messages {
			if m.Role == "assistant" {
				total++
			}
		}
	}
	return total
}

func count(m map[string][]string) int {
	n := 0
	for _, v := range m {
		n += len(v)
	}
	return n
}

// checkAnsweredOnce waits until every acknowledged message has exactly one
// answer in its web conversation, in order, and nothing else was said.
func checkAnsweredOnce(t *testing.T, tg *testGW, acked map[string][]string) {
	t.Helper()
	var last string
	if !waitFor(3*e2eWait, func() bool {
		for client, texts := range acked {
			var answers []string
			resp, err := http.Get(tg.URL + "/api/messages?client=" + client + "&after=0")
			if err != nil {
				last = err.Error()
				return false
			}
			var out struct{ Messages []webEntry }
			json.NewDecoder(resp.Body).Decode(&out)
			resp.Body.Close()
			for _, m := range out.Messages {
				if m.Role == "assistant" {
					answers = append(answers, m.Text)
				}
			}
			if len(answers) < len(texts) {
				last = fmt.Sprintf("%s: %d answers for %d messages so far", client, len(answers), len(texts))
				return false
			}
		}
		return true
	}) {
		t.Fatalf("not every acknowledged message was answered without a restart; %s", last)
	}
	for client, texts := range acked {
		var answers []string
		said := map[string]int{}
		for _, m := range webMessages(t, tg.URL, client, 0) {
			switch m.Role {
			case "assistant":
				answers = append(answers, m.Text)
			case "user":
				said[m.Text]++
			}
		}
		// A message the store did not take (503) left no entry behind:
		// the person sees each message they sent once, sent again or not.
		for _, text := range texts {
			if said[text] != 1 {
				t.Errorf("%s: %q shown %d times in the conversation, want once", client, text, said[text])
			}
		}
		seen := map[string]int{}
		for _, a := range answers {
			seen[a]++
		}
		for _, text := range texts {
			if n := seen["answer to: "+text]; n != 1 {
				t.Errorf("%s: %q answered %d times, want once; answers: %q", client, text, n, answers)
			}
		}
		if len(answers) != len(texts) {
			t.Errorf("%s: %d answers for %d acknowledged messages: %q", client, len(answers), len(texts), answers)
		}
	}
}

// TestE2EPostgresOutageIsAPause: PostgreSQL stopped for 3 s while 12 web
// clients send 10 messages each, turns in flight; then started again. The
// web API refuses with 503 and Retry-After meanwhile, and every message it
// acknowledged is answered exactly once, by the same gateway process (no
// restart).
func TestE2EPostgresOutageIsAPause(t *testing.T) {
	if pgtest.OnPostgres() {
		t.Skip("runs once, in the SQLite pass: it starts a PostgreSQL server of its own")
	}
	pg := pgtest.OwnServer(t)
	testLogger = zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	defer func() { testLogger = nil }()
	tg := newTestGatewayIn(t, t.TempDir(), outageConfig, outageModel, func(c *config.Config) {
		c.State.Driver, c.State.URL = store.DriverPostgres, config.Secret(pg.URL)
	})
	var back time.Time
	acked := outageLoad(t, tg.URL, 12, 10, func(begun func()) {
		pg.Stop()
		begun()
		time.Sleep(3 * time.Second) // the outage
		pg.Start()
		back = time.Now()
		before := answers(tg.URL, 12)
		if waitFor(2*e2eWait, func() bool { return answers(tg.URL, 12) > before }) {
			t.Logf("first answer %s after PostgreSQL came back", time.Since(back).Round(time.Millisecond))
		}
	})
	checkAnsweredOnce(t, tg, acked)
	t.Logf("every acknowledged message answered %s after PostgreSQL came back", time.Since(back).Round(time.Millisecond))
	if tg.metric(t, "herald_store_write_retries_total") == 0 && tg.metric(t, `herald_intake_refused_total{channel="web",reason="store_unavailable"}`) == 0 {
		t.Log("the outage hit no write (the load was between messages)")
	}
}

// TestE2ESQLiteWriteFaultIsAPause: every SQLite write fails for 3 s as a
// full disk would ("database or disk is full", injected at the store's
// write path) under the same load; every acknowledged message is answered
// exactly once without a restart.
func TestE2ESQLiteWriteFaultIsAPause(t *testing.T) {
	sqliteOnly(t)
	tg := newTestGatewayIn(t, t.TempDir(), outageConfig, outageModel)
	db, ok := tg.G.Store().(*store.DB)
	if !ok {
		t.Fatalf("store is %T", tg.G.Store())
	}
	acked := outageLoad(t, tg.URL, 12, 10, func(begun func()) {
		db.InjectWriteFault(errors.New("database or disk is full (13)"))
		begun()
		time.Sleep(3 * time.Second) // the outage
		db.InjectWriteFault(nil)
	})
	checkAnsweredOnce(t, tg, acked)
	if n := tg.metric(t, "herald_store_write_retries_total"); n == 0 {
		t.Error("no store write was retried: the fault hit nothing")
	}
}
