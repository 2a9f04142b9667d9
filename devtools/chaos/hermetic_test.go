package chaos

import (
	"os"
	"testing"

	"github.com/heraldhq/herald/agent/acp/acptest"
	"github.com/heraldhq/herald/devtools/harness"
	"github.com/heraldhq/herald/devtools/hermetic"
	"github.com/heraldhq/herald/devtools/pgtest"
)

// TestMain gives the gateways these tests start an empty HOME of their own
// and none of the caller's HERALD_CONFIG and HERALD_STATE_DIR, and stops
// the PostgreSQL cluster the replica tests started. The test binary is
// also the fake ACP agent the ACP crash test's gateway starts.
func TestMain(m *testing.M) {
	if acptest.Main() {
		return
	}
	done := hermetic.Setup()
	code := pgtest.Main(m)
	harness.RemoveBuilt()
	done()
	os.Exit(code)
}
