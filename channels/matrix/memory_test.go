package matrix

import (
	"fmt"
	"testing"
)

func TestRecentForgetsOldestFirst(t *testing.T) {
	r := newRecent(3)
	for i := range 5 {
		r.put(fmt.Sprint(i), "v")
	}
	for i, want := range []bool{false, false, true, true, true} {
		if got := r.has(fmt.Sprint(i)); got != want {
			t.Errorf("has(%d) = %v, want %v", i, got, want)
		}
	}
	r.del("3")
	r.put("5", "v") // room for it without evicting "2"
	if !r.has("2") || r.has("3") || !r.has("5") || r.len() != 3 {
		t.Fatalf("after del and put: %v", r.vals)
	}
	r.put("2", "updated") // an update does not evict
	if v, _ := r.get("2"); v != "updated" || r.len() != 3 {
		t.Fatalf("update: %v", r.vals)
	}
}
