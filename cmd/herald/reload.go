package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/gateway"
)

// pidFile is where a running gateway writes its process id, in its state dir.
const pidFile = "herald.pid"

// writePID records this process as the state dir's gateway; the returned
// func removes the file again.
func writePID(stateDir string) (func(), error) {
	path := filepath.Join(stateDir, pidFile)
	if err := os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("write pid file: %w", err)
	}
	return func() { os.Remove(path) }, nil
}

// watchReloads reloads the config on every SIGHUP until stop is closed.
func watchReloads(g *gateway.Gateway, f *flags, log *zap.Logger, stop <-chan struct{}) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-hup:
			log.Info("SIGHUP: reloading the config")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			g.Reload(ctx, func() (*config.Config, error) {
				cfg, path, err := config.Open(f.config, nil)
				if err != nil {
					return nil, fmt.Errorf("config %s:\n%w", path, err)
				}
				return cfg, nil
			})
			cancel()
		case <-stop:
			return
		}
	}
}

// reloadCmd is `herald reload`: check the config here first, then signal the
// state dir's running gateway and report what it did.
func reloadCmd(f *flags, stdout, stderr io.Writer) int {
	cfg, path, ok := loadConfig(f, stderr)
	if !ok {
		fmt.Fprintln(stderr, "herald: not reloading: the running gateway keeps its config")
		return 1
	}
	stateDir := config.ResolveStateDir(f.stateDir, nil)
	pid, err := readPID(stateDir)
	if err != nil {
		fmt.Fprintf(stderr, "herald: %v\n", err)
		return 1
	}
	ctx := context.Background()
	db, err := openState(ctx, cfg, f)
	if err != nil {
		fmt.Fprintf(stderr, "herald: %v\n", err)
		return 1
	}
	defer db.Close()
	replica := cfg.ReplicaIDOf(pid)
	before, _, err := gateway.LastReload(ctx, db, replica)
	if err != nil {
		fmt.Fprintf(stderr, "herald: %v\n", err)
		return 1
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		fmt.Fprintf(stderr, "herald: signal gateway (pid %d): %v\n", pid, err)
		return 1
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, ok, err := gateway.LastReload(ctx, db, replica)
		if err != nil {
			fmt.Fprintf(stderr, "herald: %v\n", err)
			return 1
		}
		if ok && res.Seq > before.Seq {
			return printReload(res, path, pid, stdout, stderr)
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(stderr, "herald: the gateway (pid %d) did not report a reload within 30 s; see its log\n", pid)
			return 1
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// missingVarRe finds the config's "variable is not set" problems.
var missingVarRe = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`environment variable ([A-Za-z_][A-Za-z0-9_]*) is not set`)
})

func printReload(res gateway.ReloadResult, path string, pid int, stdout, stderr io.Writer) int {
	if res.Result != "ok" {
		// The config loaded here before the signal, so a variable the
		// gateway misses is one this shell has: say whose environment lacks it.
		var missing []string
		errs := make([]string, len(res.Errors))
		for i, e := range res.Errors {
			errs[i] = missingVarRe().ReplaceAllStringFunc(e, func(m string) string {
				name := missingVarRe().FindStringSubmatch(m)[1]
				if _, here := os.LookupEnv(name); !here {
					return m
				}
				if !slices.Contains(missing, name) {
					missing = append(missing, name)
				}
				return fmt.Sprintf("environment variable %s is not set in the gateway's environment (pid %d)", name, pid)
			})
		}
		fmt.Fprintf(stderr, "herald: reload rejected; the gateway keeps its old config:\n  %s\n", strings.Join(errs, "\n  "))
		if len(missing) > 0 {
			fmt.Fprintf(stderr, "this shell has %s, the gateway does not: a process keeps the environment it was started with,\n"+
				"so restart the gateway (pid %d) with it set (systemd: its EnvironmentFile)\n", strings.Join(missing, ", "), pid)
		}
		return 1
	}
	changed := "nothing changed"
	if len(res.Changed) > 0 {
		changed = "changed: " + strings.Join(res.Changed, ", ")
	}
	fmt.Fprintf(stdout, "reloaded %s (%s)\n", path, changed)
	if len(res.NeedsRestart) > 0 {
		fmt.Fprintf(stdout, "restart the gateway to apply: %s\n", strings.Join(res.NeedsRestart, ", "))
	}
	return 0
}

// readPID returns the process id of the state dir's running gateway.
func readPID(stateDir string) (int, error) {
	path := filepath.Join(stateDir, pidFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("no running gateway for state dir %s (no %s)", stateDir, path)
	}
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s: not a process id: %q", path, strings.TrimSpace(string(b)))
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return 0, fmt.Errorf("no running gateway for state dir %s (pid %d from %s: %v)", stateDir, pid, path, err)
	}
	return pid, nil
}
