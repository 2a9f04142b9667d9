package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestStackGrowsBeforeDeepInits: package stackstart grows the main
// goroutine's stack before the packages whose initialisation recurses
// hundreds of frames deep (their regexps' counted repetitions), which Go
// runs in import-path order once their imports are done: a rename that
// sorted it after them would leave the stack to double under them again.
func TestStackGrowsBeforeDeepInits(t *testing.T) {
	t.Parallel()
	bin := buildHerald(t)
	cmd := exec.Command(bin, "version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("herald version: %v\n%s", err, out)
	}
	var order []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "init" {
			order = append(order, f[1])
		}
	}
	at := slices.Index(order, "github.com/heraldhq/herald/cmd/herald/stackstart")
	if at < 0 {
		t.Fatalf("stackstart did not initialise; inits:\n%s", strings.Join(order, "\n"))
	}
	for _, deep := range []string{"github.com/yuin/goldmark/extension", "github.com/yuin/goldmark/parser", "maunium.net/go/mautrix/id"} {
		if i := slices.Index(order, deep); i >= 0 && i < at {
			t.Errorf("%s initialised before stackstart (%d < %d)", deep, i, at)
		}
	}
}
