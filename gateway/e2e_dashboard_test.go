package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestGrafanaDashboardMetricsExist: every metric the dashboard in
// docs/grafana-dashboard.json queries is one the gateway exports, checked
// against /metrics of a gateway that has made a model call and an MCP tool
// call (histograms appear once observed).
func TestGrafanaDashboardMetricsExist(t *testing.T) {
	b, err := os.ReadFile("../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	name := regexp.MustCompile(`\b(?:herald|go)_[a-z_]+\b`)
	used := map[string]string{} // metric family → panel
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			for _, m := range name.FindAllString(q.Expr, -1) {
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					m = strings.TrimSuffix(m, suffix)
				}
				used[m] = p.Title
			}
		}
	}
	if len(used) < 15 {
		t.Fatalf("the dashboard queries only %d metrics", len(used))
	}

	tg := mcpGateway(t, "")
	waitMCPUp(t, tg, "remote")
	seq := webPost(t, tg.URL, "ann", "call mcp__remote__echo dashboard")
	waitWeb(t, tg, "ann", seq, "announce", func(string) bool { return true })
	resp, err := http.Get(tg.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var exported []string
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			exported = append(exported, f[2])
		}
	}
	for m, panel := range used {
		if !slices.Contains(exported, m) {
			t.Errorf("panel %q queries %s, which /metrics does not export", panel, m)
		}
	}
}

// TestGrafanaDashboardLinksToTraces: the dashboard links to the traces of
// Herald's messages — Grafana Explore on the dashboard's tracing data
// source ($traces, a Tempo one) with a TraceQL query for herald's spans.
func TestGrafanaDashboardLinksToTraces(t *testing.T) {
	b, err := os.ReadFile("../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Links []struct {
			Title string `json:"title"`
			URL   string `json:"url"`
		} `json:"links"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query string `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	if !slices.ContainsFunc(dash.Templating.List, func(v struct {
		Name  string `json:"name"`
		Type  string `json:"type"`
		Query string `json:"query"`
	}) bool {
		return v.Name == "traces" && v.Type == "datasource" && v.Query == "tempo"
	}) {
		t.Errorf("no $traces data source variable of type tempo: %+v", dash.Templating.List)
	}
	found := false
	for _, l := range dash.Links {
		u, err := url.QueryUnescape(l.URL)
		if err != nil {
			t.Errorf("link %q: %v", l.Title, err)
			continue
		}
		if strings.HasPrefix(u, "/explore?") && strings.Contains(u, `"uid":"${traces}"`) && strings.Contains(u, `resource.service.name=\"herald\"`) &&
			strings.Contains(u, "herald.intake") {
			found = true
		}
	}
	if !found {
		t.Errorf("no dashboard link to herald's traces in Explore: %+v", dash.Links)
	}
}
