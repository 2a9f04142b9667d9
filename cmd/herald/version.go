package main

import (
	"cmp"
	"fmt"
	"io"
	"runtime/debug"
)

// version is stamped by `make release` (-ldflags "-X main.version=v1.2.3");
// empty in other builds, which show the module version instead.
var version string

// printVersion prints what the binary was built from (SPEC §13 `herald
// version`): the module version, the VCS revision and time when the build
// recorded them, and the Go version.
func printVersion(w io.Writer) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintln(w, "herald (no build information)")
		return
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	rev := cmp.Or(settings["vcs.revision"], "unknown")
	if settings["vcs.modified"] == "true" {
		rev += " (modified)"
	}
	fmt.Fprintf(w, "herald %s\nrevision: %s\ntime:     %s\ngo:       %s\n",
		cmp.Or(version, info.Main.Version, "(devel)"), rev, cmp.Or(settings["vcs.time"], "unknown"), info.GoVersion)
}
