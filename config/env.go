package config

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// expandEnv replaces ${VAR} (and ${VAR:-fallback}) in s. $${ is a literal
// "${". It returns the names of variables that are not set and have no
// fallback, or an error for a malformed reference.
func expandEnv(s string, env func(string) (string, bool)) (string, []string, error) {
	if !strings.Contains(s, "${") {
		return s, nil, nil
	}
	var b strings.Builder
	var missing []string
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], "$${") {
			b.WriteString("${")
			i += 3
			continue
		}
		if !strings.HasPrefix(s[i:], "${") {
			b.WriteByte(s[i])
			i++
			continue
		}
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", nil, fmt.Errorf("unterminated %q (write $${ for a literal ${)", s[i:])
		}
		ref := s[i+2 : i+end]
		name, fallback, hasFallback := strings.Cut(ref, ":-")
		if !isEnvName(name) {
			return "", nil, fmt.Errorf("bad variable reference %q: a name is letters, digits and _ (write $${ for a literal ${)", "${"+ref+"}")
		}
		if v, ok := env(name); ok {
			b.WriteString(v)
		} else if hasFallback {
			b.WriteString(fallback)
		} else {
			missing = append(missing, name)
		}
		i += end + 1
	}
	return b.String(), missing, nil
}

func isEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || (r >= 'A' && r <= 'Z') || (r >= 'a' && r <= 'z') || (i > 0 && r >= '0' && r <= '9')) {
			return false
		}
	}
	return true
}

// envExpander substitutes variables in every string of a decoded config.
type envExpander struct {
	env     func(string) (string, bool)
	lenient func(path string) bool // missing variables under this path are left empty
	add     func(path, msg string)
}

func (e *envExpander) walk(v reflect.Value, path string) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			e.walk(v.Elem(), path)
		}
	case reflect.Struct:
		t := v.Type()
		if t == channelsType {
			e.walkChannels(v.Addr().Interface().(*Channels), path)
			return
		}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if f.Anonymous && name == "" {
				e.walk(v.Field(i), path)
				continue
			}
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			e.walk(v.Field(i), joinKey(path, name))
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			e.walk(v.Index(i), joinIndex(path, i))
		}
	case reflect.Map:
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		for _, k := range keys {
			elem := reflect.New(v.Type().Elem()).Elem()
			elem.Set(v.MapIndex(k))
			e.walk(elem, joinKey(path, k.String()))
			v.SetMapIndex(k, elem)
		}
	case reflect.String:
		out, missing, err := expandEnv(v.String(), e.env)
		if err != nil {
			e.add(path, err.Error())
			return
		}
		if len(missing) > 0 && !e.lenient(path) {
			for _, name := range missing {
				e.add(path, fmt.Sprintf("environment variable %s is not set", name))
			}
			return
		}
		v.SetString(out)
	}
}
