package load

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/heraldhq/herald/devtools/harness"
)

// rig is a started fake model and gateway process for a measure.
type rig struct {
	state string // the gateway's state dir
	model *harness.Model
	gw    *harness.Gateway
	logf  func(string, ...any)
	close func()
}

// startRig builds herald (unless bin is set), starts the fake model with
// mo and a gateway whose config is cfg with the listen address and model
// URL filled in, in dir (a temp dir removed by close when dir is ""), and
// waits until the gateway is ready. close stops both.
func startRig(ctx context.Context, dir, bin string, log io.Writer, mo harness.ModelOptions, cfg harness.Config) (*rig, error) {
	r := &rig{logf: func(format string, a ...any) {
		if log != nil {
			fmt.Fprintf(log, format+"\n", a...)
		}
	}}
	var undo []func()
	r.close = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	fail := func(err error) (*rig, error) { r.close(); return nil, err }
	if dir == "" {
		d, err := os.MkdirTemp("", "herald-measure-")
		if err != nil {
			return nil, err
		}
		undo = append(undo, func() { os.RemoveAll(d) })
		dir = d
	}
	if bin == "" {
		r.logf("building herald …")
		b, err := harness.BuildHerald(ctx, dir)
		if err != nil {
			return fail(err)
		}
		bin = b
	}
	model, err := harness.StartModel(mo)
	if err != nil {
		return fail(err)
	}
	undo = append(undo, model.Close)
	r.model = model
	addr, err := harness.FreeAddr()
	if err != nil {
		return fail(err)
	}
	cfg.Listen, cfg.ModelURL = addr, model.URL
	cfgPath := filepath.Join(dir, "herald.json5")
	if err := cfg.Write(cfgPath); err != nil {
		return fail(err)
	}
	r.state = filepath.Join(dir, "state")
	gw, err := harness.StartGateway(bin, cfgPath, r.state, filepath.Join(dir, "gateway.log"), "http://"+addr)
	if err != nil {
		return fail(err)
	}
	undo = append(undo, func() { _ = gw.Term(15 * time.Second) })
	r.gw = gw
	if err := gw.WaitReady(ctx); err != nil {
		return fail(err)
	}
	return r, nil
}
