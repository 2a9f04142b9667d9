package web_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/heraldhq/herald/channels/web"
)

// TestRateLimitPerAddressOffLoopback: off loopback the rate limit applies
// to each remote address as well as each client, so one address cannot
// post past it by using new client ids; on loopback it stays per client.
func TestRateLimitPerAddressOffLoopback(t *testing.T) {
	limit := web.RateLimit{PerMinute: 1, Burst: 2}
	for _, off := range []bool{false, true} {
		h := newHarness(t, web.Options{Token: "t", OffLoopback: off, RateLimit: limit}, nil)
		var got []int
		for _, client := range []string{"c1", "c2", "c3"} {
			b, _ := json.Marshal(map[string]string{"client": client, "text": "hi"})
			got = append(got, h.do(t, "POST", "/api/messages", string(b), map[string]string{"Authorization": "Bearer t"}).status)
		}
		want := []int{http.StatusAccepted, http.StatusAccepted, http.StatusAccepted}
		if off {
			want[2] = http.StatusTooManyRequests
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("offLoopback=%v: posts as three clients from one address: %v, want %v", off, got, want)
				break
			}
		}
	}
}

// TestClientSecretOptionalOnLoopback: on loopback no secret is issued or
// needed (the API is as it was), while off loopback the first post issues
// one and the same client without it is refused.
func TestClientSecretOptionalOnLoopback(t *testing.T) {
	h := newHarness(t, web.Options{}, nil)
	if r := h.post(t, "loop", "hi"); r.status != http.StatusAccepted || r.body["clientSecret"] != nil {
		t.Errorf("loopback post: %d %s, want 202 without clientSecret", r.status, r.raw)
	}
	if r := h.post(t, "loop", "again"); r.status != http.StatusAccepted {
		t.Errorf("loopback second post without a secret: %d %s", r.status, r.raw)
	}
	h = newHarness(t, web.Options{Token: "t", OffLoopback: true}, nil)
	auth := map[string]string{"Authorization": "Bearer t"}
	r := h.do(t, "POST", "/api/messages", `{"client":"off","text":"hi"}`, auth)
	secret, _ := r.body["clientSecret"].(string)
	if r.status != http.StatusAccepted || secret == "" {
		t.Fatalf("off-loopback first post: %d %s, want 202 with clientSecret", r.status, r.raw)
	}
	if r := h.do(t, "POST", "/api/messages", `{"client":"off","text":"x"}`, auth); r.status != http.StatusForbidden {
		t.Errorf("off-loopback post without the secret: %d %s, want 403", r.status, r.raw)
	}
	auth[web.ClientSecretHeader] = secret
	if r := h.do(t, "GET", "/api/session?client=off", "", auth); r.body["owner"] != "you" || r.body["secretRequired"] != true {
		t.Errorf("session with the secret: %s", r.raw)
	}
}
