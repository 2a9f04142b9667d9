// Package sandbox confines the processes agent tools start (exec commands,
// stdio MCP servers) with the operating system's isolation (SPEC §17).
//
// It owns the choice of mechanism (bubblewrap when bwrap works on the host,
// else Landlock with no_new_privs, else none), the probe that makes that
// choice once per process, the bwrap command line, the re-executed helper
// that applies Landlock, a seccomp socket filter, resource limits and the
// clean-up of every process a command started, and the scrubbed environment
// a confined process gets.
//
// The helper is this same binary started again under a reserved argv[0]
// (herald-sandbox, herald-sandbox-exec); the package's init runs it and
// never returns to the program's main, so any binary importing this package
// (herald itself, test binaries) can confine processes.
//
// It must not import config or any other Herald package (callers map their
// settings to a Policy), and must never hand a confined process a path,
// descriptor or variable it was not given in its Spec.
package sandbox
