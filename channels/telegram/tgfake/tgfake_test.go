package tgfake

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"
)

type response struct {
	OK          bool            `json:"ok"`
	Result      json.RawMessage `json:"result"`
	ErrorCode   int             `json:"error_code"`
	Description string          `json:"description"`
	Parameters  struct {
		RetryAfter int `json:"retry_after"`
	} `json:"parameters"`
}

func call(t *testing.T, s *Server, token, method string, params url.Values) (int, response) {
	t.Helper()
	resp, err := http.PostForm(s.URL()+"/bot"+token+"/"+method, params)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r response
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("%s: body is not Bot API JSON: %v", method, err)
	}
	return resp.StatusCode, r
}

func TestGetUpdatesHonoursOffsetAndTopics(t *testing.T) {
	s := New(t, "tok")
	s.SendText(-100, "supergroup", 5, 1, "in topic")
	s.SendText(2, "private", 0, 2, "dm")

	_, r := call(t, s, "tok", "getUpdates", url.Values{"timeout": {"0"}})
	var ups []struct {
		UpdateID int `json:"update_id"`
		Message  struct {
			ThreadID int  `json:"message_thread_id"`
			IsTopic  bool `json:"is_topic_message"`
			Text     string
			Chat     struct{ Type string }
		} `json:"message"`
	}
	if err := json.Unmarshal(r.Result, &ups); err != nil || len(ups) != 2 {
		t.Fatalf("updates %s (%v), want 2", r.Result, err)
	}
	if m := ups[0].Message; m.ThreadID != 5 || !m.IsTopic || m.Chat.Type != "supergroup" {
		t.Errorf("topic message decoded as %+v", m)
	}
	if m := ups[1].Message; m.ThreadID != 0 || m.IsTopic {
		t.Errorf("dm carries topic fields: %+v", m)
	}

	offset := url.Values{"offset": {jsonInt(ups[1].UpdateID + 1)}, "timeout": {"0"}}
	_, r = call(t, s, "tok", "getUpdates", offset)
	if string(r.Result) != "[]" {
		t.Errorf("after confirming offset, result %s, want []", r.Result)
	}
	if s.Pending() != 0 {
		t.Errorf("%d updates still pending after the offset confirmed them", s.Pending())
	}
}

func TestFailuresUseBotAPIErrors(t *testing.T) {
	s := New(t, "tok")
	if status, r := call(t, s, "bad", "getMe", nil); status != 401 || r.OK || r.ErrorCode != 401 {
		t.Errorf("bad token: %d %+v", status, r)
	}
	s.FailNext(1, 429, 5)
	status, r := call(t, s, "tok", "sendMessage", url.Values{"chat_id": {"1"}, "text": {"hi"}})
	if status != 429 || r.ErrorCode != 429 || r.Parameters.RetryAfter != 5 || r.Description != "Too Many Requests: retry after 5" {
		t.Errorf("429: %d %+v", status, r)
	}
	status, r = call(t, s, "tok", "sendMessage", url.Values{"chat_id": {"1"}, "text": {"hi"}, "message_thread_id": {"3"}})
	if status != 200 || !r.OK {
		t.Fatalf("send after the failure: %d %+v", status, r)
	}
	if sent := s.Sent(); len(sent) != 1 || sent[0].ThreadID != 3 || sent[0].Text != "hi" {
		t.Errorf("sent %+v", sent)
	}
}

func jsonInt(n int) string { b, _ := json.Marshal(n); return string(b) }

// A second getUpdates while one is waiting ends the first with 409, as
// Telegram does when two bot instances poll.
func TestSecondPollerEndsTheFirstWithConflict(t *testing.T) {
	s := New(t, "1:tok")
	first := make(chan int, 1)
	go func() {
		code, _ := call(t, s, "1:tok", "getUpdates", url.Values{"timeout": {"30"}})
		first <- code
	}()
	deadline := time.Now().Add(10 * time.Second)
	for s.Polls() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first poll never arrived")
		}
		time.Sleep(time.Millisecond)
	}
	if code, _ := call(t, s, "1:tok", "getUpdates", url.Values{"timeout": {"0"}}); code != http.StatusOK {
		t.Errorf("second poll: %d, want 200", code)
	}
	select {
	case code := <-first:
		if code != http.StatusConflict {
			t.Errorf("first poll ended with %d, want 409", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first poll was not ended by the second")
	}
	if n := s.Conflicts(); n != 1 {
		t.Errorf("Conflicts = %d, want 1", n)
	}
}
