package store

import (
	"context"
	"strings"
	"testing"
)

// A database URL's password never shows in an error or a message.
func TestPostgresURLPasswordIsNeverShown(t *testing.T) {
	for _, u := range []string{
		"postgres://herald:s3cr3t-pw@127.0.0.1:1/herald?sslmode=disable&connect_timeout=1",
		"host=127.0.0.1 port=1 user=herald password=s3cr3t-pw dbname=herald connect_timeout=1",
		"postgres://herald:s3cr3t-pw@127.0.0.1:notaport/herald",
	} {
		_, err := OpenPostgres(context.Background(), u, t.TempDir())
		if err == nil {
			t.Fatalf("OpenPostgres(%q) succeeded", u)
		}
		if strings.Contains(err.Error(), "s3cr3t-pw") {
			t.Errorf("error shows the password: %v", err)
		}
		if got := redactURL(u); strings.Contains(got, "s3cr3t-pw") {
			t.Errorf("redactURL = %q", got)
		}
	}
}
