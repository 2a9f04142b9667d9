package chaos

import (
	"os"
	"testing"

	"github.com/heraldhq/herald/devtools/harness"
	"github.com/heraldhq/herald/devtools/hermetic"
)

// TestMain gives the gateways these tests start an empty HOME of their own
// and none of the caller's HERALD_CONFIG and HERALD_STATE_DIR.
func TestMain(m *testing.M) {
	done := hermetic.Setup()
	code := m.Run()
	harness.RemoveBuilt()
	done()
	os.Exit(code)
}
