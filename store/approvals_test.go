package store

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"
)

func newApproval(code string) *Approval {
	return &Approval{Code: code, SessionKey: "agent:main:slack:group:C42", RunID: "r1", Tool: "exec",
		Args: `{"cmd":"ls"}`, Origin: slackOrigin, CreatedAt: t0, ExpiresAt: t0.Add(5 * time.Minute)}
}

func TestCreateAndGetApproval(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	a := newApproval("K7Q2")
	if err := db.CreateApproval(ctx, a); err != nil {
		t.Fatal(err)
	}
	got, err := db.GetApproval(ctx, "K7Q2")
	if err != nil {
		t.Fatal(err)
	}
	want := *a
	want.Status, want.CreatedAt, want.ExpiresAt = ApprovalPending, ms(t0), ms(t0.Add(5*time.Minute))
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("GetApproval =\n%+v\nwant\n%+v", *got, want)
	}
	if err := db.CreateApproval(ctx, newApproval("K7Q2")); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate code = %v, want ErrExists", err)
	}
	if _, err := db.GetApproval(ctx, "NOPE"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetApproval(unknown) = %v, want ErrNotFound", err)
	}
}

func TestResolveApproval(t *testing.T) {
	ctx := context.Background()
	inTime := t0.Add(time.Minute)
	late := t0.Add(5 * time.Minute) // = ExpiresAt
	tests := []struct {
		name       string
		first      string // resolve once before, "" = not
		status     string
		at         time.Time
		wantErr    error
		wantStatus string // stored afterwards
	}{
		{"approve pending", "", ApprovalApproved, inTime, nil, ApprovalApproved},
		{"deny pending", "", ApprovalDenied, inTime, nil, ApprovalDenied},
		{"timeout expires", "", ApprovalExpired, late, nil, ApprovalExpired},
		{"approve after expiry", "", ApprovalApproved, late, ErrResolved, ApprovalExpired},
		{"approve twice", ApprovalApproved, ApprovalApproved, inTime, ErrResolved, ApprovalApproved},
		{"deny after approve", ApprovalApproved, ApprovalDenied, inTime, ErrResolved, ApprovalApproved},
		{"approve after deny", ApprovalDenied, ApprovalApproved, inTime, ErrResolved, ApprovalDenied},
		{"approve expired", ApprovalExpired, ApprovalApproved, inTime, ErrResolved, ApprovalExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := newTestDB(t)
			if err := db.CreateApproval(ctx, newApproval("C1")); err != nil {
				t.Fatal(err)
			}
			if tt.first != "" {
				if _, err := db.ResolveApproval(ctx, "C1", tt.first, "U1", inTime); err != nil {
					t.Fatal(err)
				}
			}
			a, err := db.ResolveApproval(ctx, "C1", tt.status, "U9", tt.at)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ResolveApproval = %v, want %v", err, tt.wantErr)
			}
			if a == nil || a.Status != tt.wantStatus {
				t.Fatalf("returned approval = %+v, want status %s", a, tt.wantStatus)
			}
			stored, _ := db.GetApproval(ctx, "C1")
			if !reflect.DeepEqual(stored, a) {
				t.Errorf("stored %+v\nreturned %+v", stored, a)
			}
			if tt.wantErr == nil && (stored.ResolvedBy != "U9" || !stored.ResolvedAt.Equal(ms(tt.at))) {
				t.Errorf("resolved by %q at %v", stored.ResolvedBy, stored.ResolvedAt)
			}
		})
	}
	db := newTestDB(t)
	if _, err := db.ResolveApproval(ctx, "NOPE", ApprovalApproved, "U1", inTime); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown code = %v, want ErrNotFound", err)
	}
	if err := db.CreateApproval(ctx, newApproval("C2")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ResolveApproval(ctx, "C2", "maybe", "U1", inTime); err == nil {
		t.Error("resolving to an invalid status succeeded")
	}
}

func TestResolveApprovalConcurrentlyOnlyOneWins(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	if err := db.CreateApproval(ctx, newApproval("RACE")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			status := ApprovalApproved
			if i%2 == 1 {
				status = ApprovalDenied
			}
			_, err := db.ResolveApproval(ctx, "RACE", status, "U", t0.Add(time.Second))
			if err == nil {
				mu.Lock()
				wins++
				mu.Unlock()
			} else if !errors.Is(err, ErrResolved) {
				t.Errorf("ResolveApproval = %v", err)
			}
		}(i)
	}
	wg.Wait()
	if wins != 1 {
		t.Errorf("%d resolutions succeeded, want exactly 1", wins)
	}
}

func TestPendingApprovals(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t)
	for i, code := range []string{"A", "B", "C"} {
		a := newApproval(code)
		a.CreatedAt = t0.Add(time.Duration(i) * time.Second)
		if err := db.CreateApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ResolveApproval(ctx, "B", ApprovalDenied, "U1", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	got, err := db.PendingApprovals(ctx)
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
