// Package all registers every chat channel module (SPEC §21). It is the one
// file that names the channel packages: cmd/herald and the tests import it
// for its side effect; adding a channel adds one line here.
package all

import (
	_ "github.com/heraldhq/herald/channels/discord"
	_ "github.com/heraldhq/herald/channels/matrix"
	_ "github.com/heraldhq/herald/channels/slack"
	_ "github.com/heraldhq/herald/channels/telegram"
)
