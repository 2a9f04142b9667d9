package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heraldhq/herald/admin"
	"github.com/heraldhq/herald/config"
	"github.com/heraldhq/herald/store"
)

// The operator's commands beside the console (SPEC §27): dead letters,
// owed messages. Their --json output is the console API's objects.

// outboxAction is `herald outbox retry|drop <id>`: through the running
// gateway's console API when it answers at gateway.http.listen (a retried
// item is sent at once), else through the store (it works whichever
// replica holds the item, and with no gateway running; a gateway started
// later, or one that did not answer, sends it within a minute).
func outboxAction(ctx context.Context, cfg *config.Config, db store.Outbox, action, arg string, w io.Writer) error {
	id, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || id <= 0 {
		return fmt.Errorf("outbox %s: %q is not an outbox id (herald outbox list shows them)", action, arg)
	}
	if reached, err := consolePost(ctx, cfg, fmt.Sprintf("outbox/%d/%s", id, action), nil, nil); reached {
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "outbox item %d: %s\n", id, map[string]string{"retry": "queued again (attempts reset)", "drop": "dropped"}[action])
		return nil
	}
	switch action {
	case "retry":
		err = db.RetryOutbox(ctx, id, time.Now())
	case "drop":
		err = db.DropOutbox(ctx, id)
	}
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no undelivered outbox item %d (herald outbox list shows them)", id)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "outbox item %d: %s\n", id, map[string]string{"retry": "queued again (attempts reset)", "drop": "dropped"}[action])
	return nil
}

// listIntake is `herald intake list [--owed] [--json]`: inbound messages,
// newest first (owed ones: oldest first, in the order their turns run).
func listIntake(ctx context.Context, db store.Turns, f *flags, w io.Writer) error {
	var list []store.Intake
	var err error
	if f.owed {
		list, err = db.OwedIntake(ctx)
		if len(list) > f.limit && f.limit > 0 {
			list = list[:f.limit]
		}
	} else {
		list, err = db.RecentIntake(ctx, f.limit)
	}
	if err != nil {
		return err
	}
	items := admin.IntakeItems(list)
	if f.json {
		return writeJSON(w, items)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tRECEIVED\tFROM\tSESSION\tTEXT")
	for _, it := range items {
		state := "done"
		switch {
		case it.Owed && !it.StartedAt.IsZero():
			state = "owed (started)"
		case it.Owed:
			state = "owed"
		}
		text := strings.ReplaceAll(it.Text, "\n", " ")
		if r := []rune(text); len(r) > 48 {
			text = string(r[:47]) + "…"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", it.ID, state, it.CreatedAt.Local().Format(time.DateTime), it.Origin, it.SessionKey, text)
	}
	return tw.Flush()
}

// runsStop is `herald runs stop <runId>`: the running gateway stops the run
// and every run below it, on whichever replica they run (console API).
func runsStop(ctx context.Context, cfg *config.Config, id string, w io.Writer) error {
	var out struct {
		Stopped int `json:"stopped"`
	}
	reached, err := consolePost(ctx, cfg, "runs/"+url.PathEscape(id)+"/stop", nil, &out)
	if !reached {
		return fmt.Errorf("no gateway answered at %s: a run is stopped by the gateway running it", cfg.Gateway.HTTP.Listen)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "run %s: stop requested (%d live runs stopped)\n", id, out.Stopped)
	return nil
}

// gatewayURL is where this machine reaches the gateway listening on
// gateway.http.listen ("http://host:port"; a wildcard host is reached on
// 127.0.0.1); an error when the address has no fixed port.
func gatewayURL(cfg *config.Config) (string, error) {
	host, port, err := net.SplitHostPort(cfg.Gateway.HTTP.Listen)
	if err != nil {
		return "", fmt.Errorf("gateway.http.listen %q: %w", cfg.Gateway.HTTP.Listen, err)
	}
	if port == "0" || port == "" {
		return "", fmt.Errorf("gateway.http.listen %q has no fixed port", cfg.Gateway.HTTP.Listen)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

// consolePost posts body to the running gateway's console API
// (/admin/api/<path>) with gateway.admin.token, decoding the answer into
// out. reached is false when no gateway answered at gateway.http.listen;
// an answer other than 200 is an error with the API's one-line reason.
func consolePost(ctx context.Context, cfg *config.Config, path string, body, out any) (reached bool, err error) {
	base, err := gatewayURL(cfg)
	if err != nil {
		return false, nil
	}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/admin/api/"+path, rd)
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	if tok := strings.TrimSpace(cfg.Gateway.Admin.Token.Value()); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, nil
	}
	defer resp.Body.Close()
	var e struct {
		Error string `json:"error"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		json.Unmarshal(raw, &e)
		return true, fmt.Errorf("the gateway answered %s: %s", resp.Status, e.Error)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return true, fmt.Errorf("the gateway's answer: %w", err)
		}
	}
	return true, nil
}
