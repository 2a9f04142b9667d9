package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/store"
)

// ms is t as the store gives it back: unix milliseconds, UTC.
func ms(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()).UTC() }

func newApproval(code string) *store.Approval {
	return &store.Approval{Code: code, SessionKey: convKey, RunID: "r1", Tool: "exec",
		Args: `{"cmd":"ls"}`, Origin: origin, CreatedAt: t0, ExpiresAt: t0.Add(5 * time.Minute), Replica: "r1"}
}

// An approval is stored whole under its code, once.
func testApprovals(t *testing.T, s Store) {
	ctx := context.Background()
	a := newApproval("K7Q2")
	if err := s.CreateApproval(ctx, a); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetApproval(ctx, "K7Q2")
	if err != nil {
		t.Fatal(err)
	}
	want := *a
	want.Status, want.CreatedAt, want.ExpiresAt = store.ApprovalPending, ms(t0), ms(t0.Add(5*time.Minute))
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("GetApproval =\n%+v\nwant\n%+v", *got, want)
	}
	if err := s.CreateApproval(ctx, newApproval("K7Q2")); !errors.Is(err, store.ErrExists) {
		t.Errorf("duplicate code = %v, want ErrExists", err)
	}
	if _, err := s.GetApproval(ctx, "NOPE"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetApproval(unknown) = %v, want ErrNotFound", err)
	}
}

// An approval is decided once: approved, denied or expired, never changed
// after; a decision at or after its expiry is refused.
func testApprovalDecidedOnce(t *testing.T, s Store) {
	ctx := context.Background()
	inTime := t0.Add(time.Minute)
	late := t0.Add(5 * time.Minute) // = ExpiresAt
	tests := []struct {
		name       string
		first      string // resolved once before, "" = not
		status     string
		at         time.Time
		wantErr    error
		wantStatus string // stored afterwards
	}{
		{"approve pending", "", store.ApprovalApproved, inTime, nil, store.ApprovalApproved},
		{"deny pending", "", store.ApprovalDenied, inTime, nil, store.ApprovalDenied},
		{"timeout expires", "", store.ApprovalExpired, late, nil, store.ApprovalExpired},
		{"approve after expiry", "", store.ApprovalApproved, late, store.ErrResolved, store.ApprovalExpired},
		{"approve twice", store.ApprovalApproved, store.ApprovalApproved, inTime, store.ErrResolved, store.ApprovalApproved},
		{"deny after approve", store.ApprovalApproved, store.ApprovalDenied, inTime, store.ErrResolved, store.ApprovalApproved},
		{"approve after deny", store.ApprovalDenied, store.ApprovalApproved, inTime, store.ErrResolved, store.ApprovalDenied},
		{"approve expired", store.ApprovalExpired, store.ApprovalApproved, inTime, store.ErrResolved, store.ApprovalExpired},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code := fmt.Sprintf("C%d", i)
			if err := s.CreateApproval(ctx, newApproval(code)); err != nil {
				t.Fatal(err)
			}
			if tt.first != "" {
				if _, err := s.ResolveApproval(ctx, code, tt.first, "U1", inTime); err != nil {
					t.Fatal(err)
				}
			}
			a, err := s.ResolveApproval(ctx, code, tt.status, "U9", tt.at)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ResolveApproval = %v, want %v", err, tt.wantErr)
			}
			if a == nil || a.Status != tt.wantStatus {
				t.Fatalf("returned approval = %+v, want status %s", a, tt.wantStatus)
			}
			stored, _ := s.GetApproval(ctx, code)
			if !reflect.DeepEqual(stored, a) {
				t.Errorf("stored %+v\nreturned %+v", stored, a)
			}
			if tt.wantErr == nil && (stored.ResolvedBy != "U9" || !stored.ResolvedAt.Equal(ms(tt.at))) {
				t.Errorf("resolved by %q at %v", stored.ResolvedBy, stored.ResolvedAt)
			}
		})
	}
	if _, err := s.ResolveApproval(ctx, "NOPE", store.ApprovalApproved, "U1", inTime); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown code = %v, want ErrNotFound", err)
	}
	if err := s.CreateApproval(ctx, newApproval("BAD")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResolveApproval(ctx, "BAD", "maybe", "U1", inTime); err == nil {
		t.Error("resolving to an invalid status succeeded")
	}
	if a, _ := s.GetApproval(ctx, "BAD"); a == nil || a.Status != store.ApprovalPending {
		t.Errorf("after an invalid status: %+v, want still pending", a)
	}
}

// People answering at once: exactly one decision is taken, and the
// stored one is the winner's.
func testApprovalRace(t *testing.T, s Store) {
	ctx := context.Background()
	const codes, people = 8, 12
	for c := range codes {
		if err := s.CreateApproval(ctx, newApproval(fmt.Sprintf("RACE%d", c))); err != nil {
			t.Fatal(err)
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	winners := map[string][]string{}
	for c := range codes {
		code := fmt.Sprintf("RACE%d", c)
		for i := range people {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status := store.ApprovalApproved
				if i%2 == 1 {
					status = store.ApprovalDenied
				}
				by := fmt.Sprintf("U%d", i)
				<-start
				_, err := s.ResolveApproval(ctx, code, status, by, t0.Add(time.Second))
				if err == nil {
					mu.Lock()
					winners[code] = append(winners[code], by)
					mu.Unlock()
				} else if !errors.Is(err, store.ErrResolved) {
					t.Errorf("ResolveApproval = %v", err)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	for c := range codes {
		code := fmt.Sprintf("RACE%d", c)
		w := winners[code]
		if len(w) != 1 {
			t.Errorf("%s: %d resolutions succeeded (%v), want exactly 1", code, len(w), w)
			continue
		}
		if a, err := s.GetApproval(ctx, code); err != nil || a.ResolvedBy != w[0] {
			t.Errorf("%s: stored decision by %q, %v; want the winner %s", code, a.ResolvedBy, err, w[0])
		}
	}
}

// Pending approvals are the undecided ones, oldest first.
func testPendingApprovals(t *testing.T, s Store) {
	ctx := context.Background()
	for i, code := range []string{"A", "B", "C"} {
		a := newApproval(code)
		a.CreatedAt = t0.Add(time.Duration(i) * time.Second)
		if err := s.CreateApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ResolveApproval(ctx, "B", store.ApprovalDenied, "U1", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	got, err := s.PendingApprovals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, a := range got {
		codes = append(codes, a.Code)
	}
	if !reflect.DeepEqual(codes, []string{"A", "C"}) {
		t.Errorf("pending = %v, want [A C]", codes)
	}
}
