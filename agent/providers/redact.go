package providers

import (
	"regexp"
	"strings"
	"sync"
)

// keyFragment matches what providers echo of an API key in their error
// messages: OpenAI's 401 says "Incorrect API key provided: sk-proj-****abcd"
// (the key's last characters), others quote a prefix. Any token that looks
// like a key (sk-…, sk-ant-…, rk-…, pk-…, or a run of * masking one) is cut
// out whole.
var keyFragment = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)(\b(?:sk|rk|pk)-[A-Za-z0-9_\-*.…]*|[A-Za-z0-9_\-]*\*{2,}[A-Za-z0-9_\-*.…]*)`)
})

// keyProvided matches the token after "API key provided:" whatever it
// looks like.
var keyProvided = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?i)(api key provided:?\s*)\S+`) })

// redactKeys removes every part of an API key from a provider's error
// message before it is logged or put into a reply or a run's Notes: the
// configured keys themselves and the fragments providers quote of them.
func redactKeys(msg string, keys []string) string {
	for _, k := range keys {
		if len(k) >= 8 {
			msg = strings.ReplaceAll(msg, k, "[key]")
		}
	}
	msg = keyProvided().ReplaceAllString(msg, "${1}[key]")
	return keyFragment().ReplaceAllString(msg, "[key]")
}
