package slack

import "testing"

func TestStripMention(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"<@U0BOT> hello", "hello"},
		{"  <@U0BOT>: status?", "status?"},
		{"<@U0BOT|herald>, run it", "run it"},
		{"hey <@U0BOT> look", "hey <@U0BOT> look"}, // only a leading mention is removed
		{"<@U0OTHER> hello", "<@U0OTHER> hello"},   // someone else's mention stays
		{"<@U0BOT>", ""},
	} {
		if got := stripMention(tc.in, "U0BOT"); got != tc.want {
			t.Errorf("stripMention(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
