package load

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/heraldhq/herald/devtools/harness"
)

// A Timeline says when the Nth event of each step of a load run happened,
// counted from the model's first spawn answer: the fake model's call
// arrivals by kind and when their answers were written, the gateway's log lines for spawns registered and
// runs ended, and the announces seen on the event streams. Where a load
// spends its time above the model's floor shows as the step whose last
// event lags the one before it.
type Timeline struct {
	Steps []TimelineStep
	// CPU is the cores each process used in each second from a second
	// before the first spawn answer: the gateway, and this process (the
	// fake model, its TLS, the event streams' clients).
	CPU []CPUSecond
}

// CPUSecond is the CPU used in one second of the run, in cores.
type CPUSecond struct {
	From          time.Duration // after the first spawn answer
	Gateway, Load float64
}

// cpuSample is a reading of the CPU both processes used so far.
type cpuSample struct {
	at            time.Time
	gateway, load time.Duration
}

// A TimelineStep is one step's events, sorted, relative to the first spawn answer.
type TimelineStep struct {
	Name string
	At   []time.Duration
}

// String prints each step's count and its 0/1/10/50/90/99/100th events.
func (t Timeline) String() string {
	var b strings.Builder
	pcts := []int{0, 1, 10, 50, 90, 99, 100}
	fmt.Fprintf(&b, "timeline (seconds after the first spawn answer; the Nth %% of each step's events):\n%-22s %6s", "step", "n")
	for _, p := range pcts {
		fmt.Fprintf(&b, " %7s", fmt.Sprintf("%d%%", p))
	}
	b.WriteByte('\n')
	for _, s := range t.Steps {
		fmt.Fprintf(&b, "%-22s %6d", s.Name, len(s.At))
		for _, p := range pcts {
			if len(s.At) == 0 {
				fmt.Fprintf(&b, " %7s", "-")
				continue
			}
			fmt.Fprintf(&b, " %7.2f", Percentile(s.At, p).Seconds())
		}
		b.WriteByte('\n')
	}
	if len(t.CPU) > 0 {
		fmt.Fprintf(&b, "%-22s", "cpu (cores) from s")
		for _, c := range t.CPU {
			fmt.Fprintf(&b, " %5.0f", c.From.Seconds())
		}
		fmt.Fprintf(&b, "\n%-22s", "  gateway")
		for _, c := range t.CPU {
			fmt.Fprintf(&b, " %5.2f", c.Gateway)
		}
		fmt.Fprintf(&b, "\n%-22s", "  herald-load (model)")
		for _, c := range t.CPU {
			fmt.Fprintf(&b, " %5.2f", c.Load)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// timeline puts the steps together after a run.
func timeline(model *harness.Model, gatewayLog string, announces []time.Time, cpu []cpuSample) Timeline {
	t0 := model.FirstSpawn()
	var tl Timeline
	add := func(name string, ts []time.Time) {
		at := make([]time.Duration, len(ts))
		for i, x := range ts {
			at[i] = x.Sub(t0)
		}
		slices.Sort(at)
		tl.Steps = append(tl.Steps, TimelineStep{Name: name, At: at})
	}
	add("model conn accepted", model.Connections())
	add("spawn call in", model.Arrivals(harness.CallSpawn))
	add("spawn answer out", model.Answered(harness.CallSpawn))
	logged := logTimes(gatewayLog, "sub-agent spawned", "sub-agent run ended", "turn done")
	add("spawn registered", logged["sub-agent spawned"])
	add("child work call in", model.Arrivals(harness.CallWork))
	add("child work answered", model.Answered(harness.CallWork))
	add("child announce in", model.Arrivals(harness.CallAnnounce))
	add("child announce answered", model.Answered(harness.CallAnnounce))
	add("run ended (log)", logged["sub-agent run ended"])
	add("announce on stream", announces)
	add("parent after-call in", model.Arrivals(harness.CallAfter))
	add("parent turn done", logged["turn done"])
	// CPU per second, from the samples nearest each second's ends.
	at := func(t time.Time) (cpuSample, bool) {
		i, _ := slices.BinarySearchFunc(cpu, t, func(s cpuSample, t time.Time) int { return s.at.Compare(t) })
		if i >= len(cpu) {
			return cpuSample{}, false
		}
		return cpu[i], true
	}
	for from := t0.Add(-time.Second); ; from = from.Add(time.Second) {
		a, ok1 := at(from)
		b, ok2 := at(from.Add(time.Second))
		if !ok1 || !ok2 || !b.at.After(a.at) {
			break
		}
		span := b.at.Sub(a.at).Seconds()
		tl.CPU = append(tl.CPU, CPUSecond{From: from.Sub(t0).Round(time.Second),
			Gateway: (b.gateway - a.gateway).Seconds() / span, Load: (b.load - a.load).Seconds() / span})
	}
	return tl
}

// logTimes reads the gateway's JSON log and returns the times of the
// lines whose msg is one of msgs.
func logTimes(path string, msgs ...string) map[string][]time.Time {
	out := map[string][]time.Time{}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var line struct {
		TS  string `json:"ts"`
		Msg string `json:"msg"`
	}
	for sc.Scan() {
		b := sc.Bytes()
		if !bytes.HasPrefix(b, []byte("{")) {
			continue
		}
		line.TS, line.Msg = "", ""
		if json.Unmarshal(b, &line) != nil || !slices.Contains(msgs, line.Msg) {
			continue
		}
		if ts, err := time.Parse(time.RFC3339Nano, line.TS); err == nil {
			out[line.Msg] = append(out[line.Msg], ts)
		}
	}
	return out
}
