package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/heraldhq/herald/agent/acp/acptest"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/agent/sandbox"
	"github.com/heraldhq/herald/channels/matrix/matrixtest"
	"github.com/heraldhq/herald/channels/slack/slackfake"
	"github.com/heraldhq/herald/channels/telegram/tgfake"
)

const doctorTGToken = "7000000009:doctor-secret-token"

// doctorConfig: Anthropic (key from $DOCTOR_ANTHROPIC_KEY) and an
// OpenAI-compatible server, Slack in Socket Mode and Telegram long polling,
// each against its fake.
const doctorConfig = `{
  gateway: { http: { listen: %q } },
  models: { providers: {
    anthropic: { api: "anthropic", baseUrl: %q, apiKey: "${DOCTOR_ANTHROPIC_KEY}", models: [{ id: "claude-a" }] },
    local: { api: "openai-compatible", baseUrl: %q, models: [{ id: %q }] },
  } },
  agents: { defaults: { model: "anthropic/claude-a" }, list: [{ id: "main" }] },
  channels: {
    slack: { enabled: true, botToken: "xoxb-doctor", appToken: "xapp-doctor", apiUrl: %q },
    telegram: { enabled: true, botToken: %q, apiUrl: %q },
  },
}`

// TestDoctorAgainstFakes runs `herald doctor` against fakes that speak each
// platform's wire protocol: with everything right every line is ok and the
// exit status 0; with a refused API key, a model the endpoint does not
// serve, a refused Slack token and a wrong Telegram token each line says
// FAIL with what to fix, the exit status is 1, and no secret is printed.
func TestDoctorAgainstFakes(t *testing.T) {
	anth := llmtest.NewAnthropic(t, nil)
	anth.SetModels("claude-a", "claude-b")
	anth.RequireKey("good-key")
	local := llmtest.NewOpenAI(t, nil)
	local.SetModels("llama-x")
	sf := slackfake.New(t)
	tf := tgfake.New(t, doctorTGToken)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "herald.json5")
	write := func(localModel, tgToken string) {
		t.Helper()
		src := fmt.Sprintf(doctorConfig, freeAddr(t), anth.URL, local.URL+"/v1", localModel, sf.URL(), tgToken, tf.URL())
		if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	doctorRun := func() (int, string) {
		var out, errOut bytes.Buffer
		code := run([]string{"doctor", "--config", cfgPath, "--state-dir", filepath.Join(dir, "state")}, &out, &errOut)
		return code, out.String() + errOut.String()
	}

	t.Setenv("DOCTOR_ANTHROPIC_KEY", "good-key")
	write("llama-x", doctorTGToken)
	code, out := doctorRun()
	if code != 0 {
		t.Fatalf("doctor with everything right: exit %d\n%s", code, out)
	}
	for _, want := range []string{
		`(?m)^ok    config +` + regexp.QuoteMeta(cfgPath) + ` is valid$`,
		`(?m)^ok    http listen 127(\.\d+){3}:\d+ +free`,
		`(?m)^ok    state dir +.* writable; outbox 0 pending`,
		`(?m)^ok    provider anthropic +1 configured models available$`,
		`(?m)^ok    provider local +1 configured models available$`,
		`(?m)^ok    slack auth\.test +bot herald \(` + slackfake.BotUserID + `\) in team Herald Test`,
		`(?m)^ok    slack apps\.connections\.open `,
		`(?m)^ok    telegram getMe +bot @`,
		`(?m)^ok    telegram getWebhookInfo +no webhook \(long polling\)`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("doctor output lacks %s:\n%s", want, out)
		}
	}

	t.Setenv("DOCTOR_ANTHROPIC_KEY", "wrong-key")
	sf.RejectAuth(true)
	write("llama-missing", "7000000009:wrong-token")
	code, out = doctorRun()
	if code != 1 {
		t.Fatalf("doctor with four problems: exit %d\n%s", code, out)
	}
	for _, want := range []string{
		`(?m)^FAIL  provider anthropic .*401.*\n      fix: the API key was refused: check models\.providers\.anthropic\.apiKey$`,
		`(?m)^FAIL  provider local +the endpoint does not list llama-missing \(it lists 1 models\)\n      fix: fix models\.providers\.local\.models\[\]\.id$`,
		`(?m)^FAIL  slack auth\.test +invalid_auth\n      fix: check channels\.slack\.botToken`,
		`(?m)^FAIL  telegram getMe .*\n      fix: check channels\.telegram\.botToken`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("doctor output lacks %s:\n%s", want, out)
		}
	}
	for _, secret := range []string{"wrong-key", "good-key", "wrong-token", "xoxb-doctor", "xapp-doctor"} {
		if strings.Contains(out, secret) {
			t.Errorf("doctor printed the secret %q:\n%s", secret, out)
		}
	}

	// A config that does not validate: one FAIL line per problem, exit 1.
	if err := os.WriteFile(cfgPath, []byte(`{ agents: { defaults: { maxConcurrent: "two" } } }`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out = doctorRun()
	if code != 1 || !strings.HasPrefix(out, "FAIL  config ") || !strings.Contains(out, "1:") || !strings.Contains(out, "agents.defaults.maxConcurrent") {
		t.Errorf("doctor with an invalid config: exit %d\n%s", code, out)
	}
}

// TestDoctorMatrix checks a Matrix account on a real Dendrite homeserver:
// whoami and one /sync, and a wrong token.
func TestDoctorMatrix(t *testing.T) {
	hs := matrixtest.Start(t)
	bot := hs.RegisterUser(t, "doctorbot")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "herald.json5")
	check := func(token string) (int, string) {
		src := fmt.Sprintf(`{ gateway: { http: { listen: %q } }, models: { providers: { demo: { api: "demo" } } },
		  channels: { matrix: { enabled: true, homeserver: %q, userId: %q, accessToken: %q } } }`,
			freeAddr(t), hs.URL, bot.UserID, token)
		if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		code := run([]string{"doctor", "--config", cfgPath, "--state-dir", filepath.Join(dir, "state")}, &out, &out)
		return code, out.String()
	}
	code, out := check(bot.AccessToken)
	if code != 0 || !regexp.MustCompile(`(?m)^ok    matrix whoami +`+regexp.QuoteMeta(string(bot.UserID))+` on `).MatchString(out) ||
		!regexp.MustCompile(`(?m)^ok    matrix sync +\d+ joined rooms`).MatchString(out) {
		t.Errorf("doctor with a good token: exit %d\n%s", code, out)
	}
	code, out = check("not-a-token")
	if code != 1 || !regexp.MustCompile(`(?m)^FAIL  matrix login .*\n      fix: check channels\.matrix\.userId and accessToken`).MatchString(out) ||
		strings.Contains(out, "not-a-token") {
		t.Errorf("doctor with a wrong token: exit %d\n%s", code, out)
	}
}

// TestDoctorChecksEachKey: with apiKeys, doctor checks every key alone and
// names a refused one by its position, never by its value.
func TestDoctorChecksEachKey(t *testing.T) {
	anth := llmtest.NewAnthropic(t, nil)
	anth.SetModels("claude-a")
	anth.RequireKey("good-key")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "herald.json5")
	src := fmt.Sprintf(`{
  gateway: { http: { listen: %q } },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: %q,
    apiKeys: ["good-key", "revoked-key", "good-key"], models: [{ id: "claude-a" }] } } },
  agents: { defaults: { model: "anthropic/claude-a" } },
}`, freeAddr(t), anth.URL)
	if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	code := run([]string{"doctor", "--config", cfgPath, "--state-dir", filepath.Join(dir, "state")}, &out, &out)
	want := `(?m)^warn  provider anthropic +key 2 of 3: .*401.*\n +fix: the API key was refused: check key 2 of 3 in models\.providers\.anthropic\.apiKeys$`
	if code != 0 || !regexp.MustCompile(want).MatchString(out.String()) {
		t.Errorf("doctor: exit %d, want 0 and %s:\n%s", code, want, out.String())
	}
	if strings.Contains(out.String(), "revoked-key") || strings.Contains(out.String(), "good-key") {
		t.Errorf("doctor printed a key:\n%s", out.String())
	}
}

// TestDoctorSandbox: doctor says which sandbox mechanism works here and why
// the others do not, and what exec does with tools.exec.sandbox: ok with a
// working mechanism, FAIL naming the setting when none works, warn when it
// is "off".
func TestDoctorSandbox(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "herald.json5")
	doctorRun := func(mech string) (int, string) {
		t.Helper()
		src := fmt.Sprintf(`{ gateway: { http: { listen: %q } }, models: { providers: { demo: { api: "demo" } } },
		  tools: { exec: { sandbox: %q } } }`, freeAddr(t), mech)
		if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		code := run([]string{"doctor", "--config", cfgPath, "--state-dir", filepath.Join(dir, "state")}, &out, &out)
		return code, out.String()
	}
	r := sandbox.Probe()
	line := func(st sandbox.Status) string {
		if st.OK {
			return "ok    "
		}
		return "warn  "
	}
	code, out := doctorRun("auto")
	for _, want := range []string{
		`(?m)^` + line(r.Bwrap) + `sandbox bwrap +` + regexp.QuoteMeta(r.Bwrap.Detail) + `$`,
		`(?m)^` + line(r.Landlock) + `sandbox landlock +` + regexp.QuoteMeta(r.Landlock.Detail) + `$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("doctor output lacks %s:\n%s", want, out)
		}
	}
	if r.Bwrap.OK || r.Landlock.OK {
		if code != 0 || !regexp.MustCompile(`(?m)^ok    exec sandbox +(bwrap|landlock) \(tools\.exec\.sandbox "auto"\), no network$`).MatchString(out) {
			t.Errorf("doctor with a working sandbox: exit %d\n%s", code, out)
		}
	}

	restore := sandbox.OverrideProbe(sandbox.Report{Bwrap: sandbox.Status{Detail: "bwrap is not installed"},
		Landlock: sandbox.Status{Detail: "no Landlock in this kernel"}})
	defer restore()
	code, out = doctorRun("auto")
	if code != 1 || !regexp.MustCompile(`(?m)^FAIL  exec sandbox +exec is refused: .*tools\.exec\.sandbox.*bwrap is not installed.*no Landlock in this kernel.*\n      fix: .*tools\.exec\.sandbox`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^warn  sandbox bwrap +bwrap is not installed\n      fix: install bubblewrap`).MatchString(out) {
		t.Errorf("doctor where no sandbox works: exit %d\n%s", code, out)
	}
	code, out = doctorRun("off")
	if code != 0 || !regexp.MustCompile(`(?m)^warn  exec sandbox +tools\.exec\.sandbox is "off": commands run unconfined`).MatchString(out) {
		t.Errorf("doctor with sandbox off: exit %d\n%s", code, out)
	}
}

// TestDoctorACP: doctor starts each ACP agent, runs initialize and
// session/new, and prints its name, version and capabilities; a missing
// command, an agent that needs a login, and one that exits during
// initialize are failures naming what to fix.
func TestDoctorACP(t *testing.T) {
	if _, err := sandbox.Probe().Pick(sandbox.Auto, "test"); err != nil {
		t.Skipf("no sandbox here: %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "herald.json5")
	rt := func(mode string) string {
		return fmt.Sprintf(`runtime: { type: "acp", command: %q, env: { %s: %q } }`, exe, acptest.EnvMode, mode)
	}
	src := fmt.Sprintf(`{ gateway: { http: { listen: %q } }, models: { providers: { demo: { api: "demo" } } },
	  agents: { list: [{ id: "main" }, { id: "codex", %s }, { id: "claude", %s }, { id: "gemini", %s },
	    { id: "ghost", runtime: { type: "acp", command: "ghost-acp" } }] } }`, freeAddr(t), rt("work"), rt("auth"), rt("exit-init"))
	if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	code := run([]string{"doctor", "--config", cfgPath, "--state-dir", filepath.Join(dir, "state")}, &out, &out)
	for _, want := range []string{
		`(?m)^ok    acp codex +acpfake 0\.1\.0 · capabilities: loadSession$`,
		`(?m)^FAIL  acp claude +acpfake 0\.1\.0 · capabilities: loadSession: it needs a login first .*\n      fix: log the agent in, or give it its API key in agents\.list\[2\]\.runtime\.env$`,
		`(?m)^FAIL  acp gemini +the ACP agent exited during initialize: .*not logged in.*\n      fix: run agents\.list\[3\]\.runtime\.command by hand`,
		`(?m)^FAIL  acp ghost +the ACP agent could not be started: command "ghost-acp" of agent ghost: .*\n      fix: install the agent .* or fix agents\.list\[4\]\.runtime\.command$`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("doctor output lacks %s:\n%s", want, out.String())
		}
	}
	if code != 1 {
		t.Errorf("doctor exit %d, want 1", code)
	}
}
