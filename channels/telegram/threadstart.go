package telegram

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/channels"
)

var _ channels.ThreadStarter = (*Adapter)(nil)

// maxTopicName is Telegram's longest forum topic name.
const maxTopicName = 128

// StartThread implements channels.ThreadStarter (SPEC §24): a new forum
// topic named t.Name in a forum supergroup (createForumTopic; the library
// predates topics, so the call is made by name), whose first message is
// t.Text. A chat that is not a forum, or a bot without the right to manage
// topics, gets ErrNoThreads.
func (a *Adapter) StartThread(ctx context.Context, in channels.Origin, t channels.NewThread) (channels.Thread, error) {
	if in.ChatType != channels.ChatGroup {
		return channels.Thread{}, fmt.Errorf("telegram: a private chat: %w", channels.ErrNoThreads)
	}
	chatID, err := strconv.ParseInt(in.ChatID, 10, 64)
	if err != nil {
		return channels.Thread{}, fmt.Errorf("telegram: chat id %q is not a number: %w", in.ChatID, channels.ErrPermanent)
	}
	name := channels.ThreadName(t.Name, maxTopicName)
	cctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	p := tgbotapi.Params{"name": name}
	p.AddNonZero64("chat_id", chatID)
	resp, err := a.bot(cctx).MakeRequest("createForumTopic", p)
	if err != nil {
		// Permanent: not a forum, topics off, no right to manage them.
		return channels.Thread{}, channels.ThreadRefused("telegram: open a topic in "+in.ChatID, classify(a.redact(err)))
	}
	var topic struct {
		ThreadID int `json:"message_thread_id"`
	}
	if resp == nil || json.Unmarshal(resp.Result, &topic) != nil || topic.ThreadID == 0 {
		return channels.Thread{}, fmt.Errorf("telegram: createForumTopic in %s answered no message_thread_id", in.ChatID)
	}
	to := channels.Origin{Channel: Name, Account: in.Account, ChatID: in.ChatID, ChatType: in.ChatType, ThreadID: strconv.Itoa(topic.ThreadID)}
	if strings.TrimSpace(t.Text) != "" {
		if _, err := a.sendPart(ctx, chatID, to.ThreadID, t.Text); err != nil {
			// The topic is open: its first message is only missing.
			a.log.Warn("telegram: the first message of a new topic was not sent", zap.Error(err))
		}
	}
	return channels.Thread{Origin: to, Link: topicLink(chatID, topic.ThreadID)}, nil
}

// topicLink is the t.me link of a topic of a supergroup (-100<id>).
func topicLink(chatID int64, threadID int) string {
	id, ok := strings.CutPrefix(strconv.FormatInt(chatID, 10), "-100")
	if !ok {
		return ""
	}
	return fmt.Sprintf("https://t.me/c/%s/%d", id, threadID)
}
