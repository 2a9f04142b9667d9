package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSystemdUnitVerifies runs `systemd-analyze verify` on the shipped unit
// (its ExecStart pointed at an executable that exists here) and fails on
// any complaint: an unknown key or a bad value is only a warning to systemd.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	unit, err := os.ReadFile("../../packaging/systemd/herald.service")
	if err != nil {
		t.Fatal(err)
	}
	text := string(unit)
	for _, want := range []string{"DynamicUser=yes", "StateDirectory=herald", "ProtectSystem=strict", "NoNewPrivileges=yes",
		"ExecReload=/bin/kill -HUP $MAINPID", "--state-dir /var/lib/herald"} {
		if !strings.Contains(text, want) {
			t.Errorf("unit lacks %s", want)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "herald.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(text, "/usr/local/bin/herald", self)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestDockerfileMatchesModule: no Docker engine runs in CI, so the
// Dockerfile is checked for what would break silently: the Go image must
// match go.mod's Go version, the build must be static, and the image must
// run as a non-root user with the state dir as a volume.
func TestDockerfileMatchesModule(t *testing.T) {
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVer := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(mod)
	if goVer == nil {
		t.Fatal("go.mod has no go directive")
	}
	text := string(df)
	if !strings.Contains(text, "FROM golang:"+string(goVer[1])+"-") {
		t.Errorf("the Dockerfile's Go image is not golang:%s (go.mod)", goVer[1])
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "VOLUME /var/lib/herald", "HERALD_STATE_DIR=/var/lib/herald", "USER herald"} {
		if !strings.Contains(text, want) {
			t.Errorf("Dockerfile lacks %s", want)
		}
	}
}
