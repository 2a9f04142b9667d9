package slackfake

import "net/http"

// Said is a person's message the fake keeps, so conversations.replies
// returns the whole thread as Slack does, not only the bot's posts.
type Said struct {
	Channel, User, Text, TS, ThreadTS string
}

// Say records a person's message in channel (in thread threadTS if set) and
// sends it as a plain message event; it returns the message's ts. A message
// without a mention in a group needing one is not answered, but it is part
// of the thread's history.
func (s *Server) Say(channel, user, text, threadTS string) string {
	ts := s.NextTS()
	s.said(Said{Channel: channel, User: user, Text: text, TS: ts, ThreadTS: threadTS})
	s.SendEvent(MessageEvent(channelType(channel), channel, user, text, ts, threadTS))
	return ts
}

// SetUserName sets the display name users.info gives for user.
func (s *Server) SetUserName(user, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.names == nil {
		s.names = map[string]string{}
	}
	s.names[user] = name
}

// RepliesCalls is how many conversations.replies calls the fake answered.
func (s *Server) RepliesCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.repliesCalls
}

func (s *Server) said(m Said) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people = append(s.people, m)
}

// peopleIn returns the persons' messages of thread ts in channel (the root
// included) as Slack message objects.
func (s *Server) peopleIn(channel, ts string) []tsMessage {
	var out []tsMessage
	for _, m := range s.people {
		if m.Channel != channel || (m.TS != ts && m.ThreadTS != ts) {
			continue
		}
		msg := map[string]any{"type": "message", "user": m.User, "text": m.Text, "ts": m.TS}
		if m.ThreadTS != "" {
			msg["thread_ts"] = m.ThreadTS
		} else {
			msg["thread_ts"] = m.TS
		}
		out = append(out, tsMessage{ts: m.TS, msg: msg})
	}
	return out
}

// usersInfo answers users.info with the name set by SetUserName (else the
// id) as the profile's display name.
func (s *Server) usersInfo(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	user := r.Form.Get("user")
	s.mu.Lock()
	name := s.names[user]
	s.mu.Unlock()
	if user == "" {
		writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": "user_not_found"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "user": map[string]any{
		"id": user, "name": user, "real_name": name, "profile": map[string]any{"display_name": name, "real_name": name}}})
}
