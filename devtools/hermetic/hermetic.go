// Package hermetic keeps a test binary away from the caller's Herald: its
// Setup, called from TestMain, gives the process a fresh, empty HOME and
// drops HERALD_CONFIG and HERALD_STATE_DIR (and the API keys the built-in
// default config reads), so that nothing a test runs — the CLI in-process
// or a `herald` binary it starts — reads the operator's
// ~/.herald/herald.json5, writes to the operator's state or calls a paid
// model. It keeps the caches that live under the real HOME (Go's build and
// module caches, npm's, Herald's tool cache) where they are, so a test that
// builds or downloads stays as fast as before. It must not be imported
// outside tests.
package hermetic

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Cleared are the variables Setup removes: they would point the code under
// test at the caller's config or state, or (the built-in default config
// reads them) turn the offline demo model into a paid API.
var Cleared = []string{"HERALD_CONFIG", "HERALD_STATE_DIR", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL"}

// Setup gives the process a new empty HOME (and XDG config/cache/data
// dirs under it), pins the caches that default to the old HOME, and
// unsets Cleared. The returned func removes the temporary HOME; call it
// after m.Run. Setup panics when it cannot make the directory: a test
// binary must not go on with the caller's HOME.
//
//	func TestMain(m *testing.M) {
//		done := hermetic.Setup()
//		code := m.Run()
//		done()
//		os.Exit(code)
//	}
func Setup() (done func()) {
	realHome, _ := os.UserHomeDir()
	userCache, _ := os.UserCacheDir()
	pin := map[string]string{}
	// Go's own locations, as the go command resolves them now (GOENV holds
	// the user's `go env -w` settings: GOPROXY, GOFLAGS, …).
	if goBin, err := exec.LookPath("go"); err == nil {
		if out, err := exec.Command(goBin, "env", "GOCACHE", "GOMODCACHE", "GOPATH", "GOENV").Output(); err == nil {
			lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
			for i, name := range []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOENV"} {
				if i < len(lines) && lines[i] != "" {
					pin[name] = lines[i]
				}
			}
		}
	}
	if realHome != "" {
		pin["npm_config_cache"] = filepath.Join(realHome, ".npm")
	}
	if userCache != "" {
		pin["HERALD_CACHE"] = filepath.Join(userCache, "herald") // scripts/dendrite.sh's default
	}
	for name, v := range pin {
		if _, set := os.LookupEnv(name); !set {
			os.Setenv(name, v)
		}
	}
	home, err := os.MkdirTemp("", "herald-test-home-")
	if err != nil {
		panic(fmt.Sprintf("hermetic: make a HOME: %v", err))
	}
	os.Setenv("HOME", home)
	os.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	os.Setenv("XDG_CACHE_HOME", filepath.Join(home, ".cache"))
	os.Setenv("XDG_DATA_HOME", filepath.Join(home, ".local", "share"))
	for _, name := range Cleared {
		os.Unsetenv(name)
	}
	return func() { os.RemoveAll(home) }
}
