package main

import (
	"os"
	"testing"

	"github.com/heraldhq/herald/agent/acp/acptest"
	"github.com/heraldhq/herald/devtools/harness"
	"github.com/heraldhq/herald/devtools/hermetic"
	"github.com/heraldhq/herald/devtools/pgtest"
)

// TestMain runs every test of the CLI with its own empty HOME and without
// the caller's HERALD_CONFIG and HERALD_STATE_DIR (a user who ran
// `herald init` has a ~/.herald/herald.json5 the tests must not read),
// and stops the PostgreSQL cluster the failover tests started.
func TestMain(m *testing.M) {
	if acptest.Main() { // the fake ACP agent of TestDoctorACP; exits
		return
	}
	done := hermetic.Setup()
	code := pgtest.Main(m)
	harness.RemoveBuilt()
	done()
	os.Exit(code)
}
