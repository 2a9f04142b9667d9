package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/titanous/json5"
)

// source remembers the file a Config came from and where each key path
// starts in it. It holds no values, so it never leaks a secret.
type source struct {
	file string
	pos  map[string]Pos
}

// ErrNotFound is returned (wrapped) by Open when an explicitly named config
// file does not exist.
var ErrNotFound = errors.New("config file not found")

func osLookupEnv(k string) (string, bool) { return os.LookupEnv(k) }

// Load reads the JSON5 config file at path strictly (unknown keys and wrong
// types are errors), substitutes ${VAR} in string values using env (nil =
// the process environment) and applies defaults. Decoding problems are
// returned together as a *Problems. Load does not call Validate.
func Load(path string, env func(string) (string, bool)) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, data, env)
}

// Parse is Load for a file already in memory; file names it in problems.
func Parse(file string, data []byte, env func(string) (string, bool)) (*Config, error) {
	cfg, probs := parse(file, data, env, nil)
	if err := probs.errOrNil(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// parse decodes data and substitutes the environment, collecting every
// problem. cfg is nil only when the file cannot be decoded at all (syntax,
// a wrong type); with unknown keys or missing variables it is the rest of
// the config, for Validate to look at too. only, when set, limits the
// variables that must be set to the key paths it accepts: the others are
// left empty (the read-only commands need nothing but state).
func parse(file string, data []byte, env func(string) (string, bool), only func(path string) bool) (*Config, *Problems) {
	if env == nil {
		env = osLookupEnv
	}
	probs := &Problems{File: file}
	li := newLineIndex(data)
	src := bytes.TrimPrefix(data, []byte("\uFEFF"))
	bom := len(data) - len(src)

	// Syntax: Herald's own parser first (its messages say what to fix, as
	// "missing comma after …?"), then the decoder's, which must agree.
	root, err := parseJSON5(data)
	if err != nil {
		var pe *parseError
		errors.As(err, &pe)
		p := li.pos(pe.off)
		probs.List = append(probs.List, Problem{Line: p.Line, Col: p.Col, Msg: "syntax error: " + pe.msg})
		return nil, probs
	}
	var any0 any
	if err := json5.Unmarshal(src, &any0); err != nil {
		var se *json5.SyntaxError
		if errors.As(err, &se) {
			off := int(se.Offset) - 1 + bom
			if int(se.Offset) >= len(src) {
				off = len(data)
			}
			p := li.pos(off)
			probs.List = append(probs.List, Problem{Line: p.Line, Col: p.Col, Msg: "syntax error: " + strings.Replace(strings.TrimPrefix(err.Error(), "json: "), "JSON input", "file", 1)})
		} else {
			probs.List = append(probs.List, Problem{Msg: "syntax error: " + err.Error()})
		}
		return nil, probs
	}
	if root.kind != kindObject {
		p := li.pos(root.off)
		probs.List = append(probs.List, Problem{Line: p.Line, Col: p.Col, Msg: "the config must be an object ({ … }), got " + root.kind.String()})
		return nil, probs
	}
	sc := &strictChecker{li: li}
	sc.check(root, reflect.TypeOf(Config{}), "")
	probs.List = append(probs.List, sc.problems...)
	pos := map[string]Pos{"": li.pos(root.off)}
	indexPositions(root, "", li, pos)

	// With unknown keys reported above, decode the rest (a wrong type still
	// stops here: there is no value to check further).
	cfg := &Config{}
	dec := json5.NewDecoder(bytes.NewReader(src))
	if len(sc.problems) == 0 {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(cfg); err != nil {
		if len(sc.problems) == 0 {
			probs.List = append(probs.List, Problem{Msg: "decode: " + strings.TrimPrefix(err.Error(), "json: ")})
		}
		return nil, probs
	}
	cfg.src = &source{file: file, pos: pos}

	disabled := map[string]bool{
		"channels.web": cfg.Channels.Web.Enabled != nil && !*cfg.Channels.Web.Enabled,
	}
	for _, name := range RegisteredChannels() {
		o, ok := cfg.Channels.mods[name]
		disabled[joinKey("channels", name)] = !ok || !o.Common().Enabled
	}
	for name, s := range cfg.MCP.Servers {
		disabled[joinKey("mcp.servers", name)] = s.Enabled != nil && !*s.Enabled
	}
	ex := &envExpander{
		env: env,
		lenient: func(path string) bool {
			if only != nil && !only(path) {
				return true
			}
			for prefix, off := range disabled {
				if off && (path == prefix || strings.HasPrefix(path, prefix+".") || strings.HasPrefix(path, prefix+"[")) {
					return true
				}
			}
			return false
		},
		add: func(path, msg string) {
			p := cfg.position(path)
			probs.List = append(probs.List, Problem{Path: path, Line: p.Line, Col: p.Col, Msg: msg})
		},
	}
	ex.walk(reflect.ValueOf(cfg).Elem(), "")
	cfg.ApplyDefaults(env)
	return cfg, probs
}

// File is the config file's path, or a description of the built-in default.
func (c *Config) File() string {
	if c.src == nil {
		return ""
	}
	return c.src.file
}

// position is where a key path (or its nearest ancestor that the file
// spells out) starts; the zero Pos when the config has no file.
func (c *Config) position(path string) Pos {
	if c.src == nil || c.src.pos == nil {
		return Pos{}
	}
	for {
		if p, ok := c.src.pos[path]; ok {
			return p
		}
		if path == "" {
			return Pos{}
		}
		path = parentPath(path)
	}
}

func parentPath(path string) string {
	if strings.HasSuffix(path, "]") {
		// [3] or ["key"]: find the matching '['.
		if i := strings.LastIndex(path, "["); i >= 0 {
			if strings.HasSuffix(path, "\"]") {
				if j := strings.LastIndex(path[:len(path)-2], "[\""); j >= 0 {
					return path[:j]
				}
			}
			return path[:i]
		}
	}
	if i := strings.LastIndexAny(path, ".["); i >= 0 {
		return path[:i]
	}
	return ""
}

// home is the user's home directory: $HOME from env, else the OS's idea.
func home(env func(string) (string, bool)) string {
	if env != nil {
		if h, ok := env("HOME"); ok && h != "" {
			return h
		}
	}
	h, _ := os.UserHomeDir()
	return h
}

// ExpandHome replaces a leading "~" or "~/" with the user's home directory.
func ExpandHome(path string) string {
	if path == "~" || strings.HasPrefix(path, "~/") {
		h, err := os.UserHomeDir()
		if err != nil || h == "" {
			return path
		}
		return filepath.Join(h, strings.TrimPrefix(path, "~"))
	}
	return path
}

func expandHomeWith(path string, env func(string) (string, bool)) string {
	if path == "~" || strings.HasPrefix(path, "~/") {
		if h := home(env); h != "" {
			return filepath.Join(h, strings.TrimPrefix(path, "~"))
		}
	}
	return path
}

// ResolvePath picks the config file: flag (--config), else $HERALD_CONFIG,
// else ~/.herald/herald.json5. explicit is false only for the last, where a
// missing file means "use Default".
func ResolvePath(flag string, env func(string) (string, bool)) (path string, explicit bool) {
	if env == nil {
		env = osLookupEnv
	}
	if flag != "" {
		return expandHomeWith(flag, env), true
	}
	if v, ok := env("HERALD_CONFIG"); ok && v != "" {
		return expandHomeWith(v, env), true
	}
	return filepath.Join(home(env), ".herald", "herald.json5"), false
}

// ResolveStateDir picks the state directory: flag (--state-dir), else
// $HERALD_STATE_DIR, else ~/.herald.
func ResolveStateDir(flag string, env func(string) (string, bool)) string {
	if env == nil {
		env = osLookupEnv
	}
	if flag != "" {
		return expandHomeWith(flag, env)
	}
	if v, ok := env("HERALD_STATE_DIR"); ok && v != "" {
		return expandHomeWith(v, env)
	}
	return filepath.Join(home(env), ".herald")
}

// Open is what commands call: it resolves the config path from flag and env,
// loads it — or returns Default when the implicit default path does not
// exist (path is then "") — and validates it. An explicit path that does not
// exist is an error wrapping ErrNotFound. On problems, err is a *Problems
// with every problem at once: unknown keys, missing variables and
// validation problems (a bad enum value, a missing token) together.
func Open(flag string, env func(string) (string, bool)) (cfg *Config, path string, err error) {
	return open(flag, env, nil)
}

// OpenState is Open for the commands that only read the state (runs,
// sessions and outbox lists, transcripts, backup): only the state section
// must be right. A variable missing elsewhere (a channel's token, a
// provider's key) is left empty and not reported, and neither is any other
// problem outside state; the returned config is for its State only.
func OpenState(flag string, env func(string) (string, bool)) (cfg *Config, path string, err error) {
	return open(flag, env, func(path string) bool { return path == "" || path == "state" || strings.HasPrefix(path, "state.") })
}

func open(flag string, env func(string) (string, bool), only func(path string) bool) (cfg *Config, path string, err error) {
	if env == nil {
		env = osLookupEnv
	}
	path, explicit := ResolvePath(flag, env)
	if _, statErr := os.Stat(path); errors.Is(statErr, fs.ErrNotExist) {
		if explicit {
			return nil, path, fmt.Errorf("%w: %s", ErrNotFound, path)
		}
		cfg = Default(env)
		return cfg, "", cfg.Validate()
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, path, fmt.Errorf("read config: %w", err)
	}
	cfg, probs := parse(path, data, env, only)
	if cfg != nil {
		// Validate what decoded, except where a problem is already reported
		// (a key with a missing variable holds no value to judge).
		reported := map[string]bool{}
		for _, p := range probs.List {
			reported[p.Path] = true
		}
		var vp *Problems
		if errors.As(cfg.Validate(), &vp) {
			for _, p := range vp.List {
				if !reported[p.Path] {
					probs.List = append(probs.List, p)
				}
			}
		}
	}
	if only != nil {
		probs.List = slices.DeleteFunc(probs.List, func(p Problem) bool { return !only(p.Path) })
	}
	if err := probs.errOrNil(); err != nil {
		return nil, path, err
	}
	return cfg, path, nil
}
