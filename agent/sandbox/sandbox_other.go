//go:build !linux

package sandbox

import "context"

// Elsewhere than Linux neither mechanism exists: only "off" runs commands.
func probe() Report {
	const why = "Linux only"
	return Report{Bwrap: Status{Detail: why}, Landlock: Status{Detail: why}}
}

func command(ctx context.Context, mech string, spec Spec) (*Cmd, error) {
	if mech != Off {
		return nil, ErrUnavailable
	}
	c := &Cmd{Mechanism: Off}
	newCmd(ctx, c, lookPath(spec.Argv[0], spec.Env), spec.Argv, spec.Env, spec.Dir)
	setGroup(c.Cmd)
	return c, nil
}

func stop(c *Cmd) error { return killGroup(c.Cmd) }
