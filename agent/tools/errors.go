package tools

import (
	"errors"

	"github.com/heraldhq/herald/agent"
)

var (
	// ErrBadArguments is wrapped by every error about a tool call's
	// arguments (agent.ErrBadArguments).
	ErrBadArguments = agent.ErrBadArguments
	// ErrOutsideWorkspace is wrapped when a path leaves the agent workspace,
	// lexically or through a symbolic link.
	ErrOutsideWorkspace = errors.New("outside the workspace")
	// ErrNoWorkspace is returned when the call context names no workspace.
	ErrNoWorkspace = errors.New("no workspace configured")
	// ErrReadOnly is wrapped when a write tool is given a path in the agent
	// workspace, which tools may read but never write (SPEC §17).
	ErrReadOnly = errors.New("read-only")
)
