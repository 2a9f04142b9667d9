package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/providers"
	"github.com/heraldhq/herald/agent/tools"
	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/channels/web"
	"github.com/heraldhq/herald/ids"
	"github.com/heraldhq/herald/media"
	"github.com/heraldhq/herald/store"
)

// AttachmentDeadline bounds the download of one file on an inbound message
// (SPEC §18): a platform that stalls past it leaves the file unread and
// the person is told; the message is still taken. Tests shorten it.
var AttachmentDeadline = 2 * time.Minute

// fileSweepEvery is how often the retention sweeper looks for files no
// conversation named for attachments.retentionDays.
const fileSweepEvery = time.Hour

// takeFiles stores the files of an inbound message before it is stored
// itself (and so before the platform is acknowledged): each is streamed
// to the store under attachments.maxBytes and a deadline, its type sniffed
// from its bytes. It returns the stored files, the message text with a
// reference line per file, and a 📎 line per file not read. A store
// outage is returned as an error: the message is then not taken at all.
// The files of conversation key stay within attachments.maxStoredMB,
// maxTotalMB and the disk floor (minFreeMB); their bytes are held against
// those (in the store, quota.go) until release is called, once the message
// is stored.
func (g *Gateway) takeFiles(ctx context.Context, key string, in channels.Inbound, log *zap.Logger) (text string, refs []store.FileRef, notes []string, release func(), err error) {
	conf := g.cfg().Attachments
	text = in.Text
	holds := &fileHolds{g: g, key: key}
	release = func() { holds.release(log) }
	used := map[string]bool{}
	hinted := false
	for i, a := range in.Attachments {
		if (a.Kind == channels.KindVoice || a.Kind == channels.KindAudio) && !conf.Transcription.Enabled() && !hinted {
			notes = append(notes, media.VoiceHint)
			hinted = true
		}
		name := media.SafeName(a.Name, a.MIME)
		if i >= conf.MaxFiles {
			notes = append(notes, media.NotReadLine(name, fmt.Sprintf("a message takes at most %d files (attachments.maxFiles)", conf.MaxFiles)))
			continue
		}
		if a.Err != nil {
			notes = append(notes, media.NotReadLine(name, a.Err.Error()))
			continue
		}
		if a.Size > conf.MaxBytes {
			notes = append(notes, media.NotReadLine(name, fmt.Sprintf("it is over the %s limit (attachments.maxBytes)", media.Size(conf.MaxBytes))))
			continue
		}
		hold, limit, full, err := holds.hold(ctx, conf.MaxBytes)
		if err != nil {
			return "", nil, nil, release, err
		}
		if limit <= 0 || a.Size > limit {
			notes = append(notes, media.NotReadLine(name, full))
			continue
		}
		g.inFlight.Add(limit)
		ref, err := g.fetchFile(ctx, a, limit)
		g.inFlight.Add(-limit)
		holds.stored(ctx, hold, ref.Size, log)
		if err != nil {
			if !fileProblem(err) && storeFailed(err) {
				return "", nil, nil, release, err
			}
			log.Info("file on a message not read", zap.String("file", name), zap.Error(err))
			reason := fileReason(err, conf.MaxBytes)
			if errors.Is(err, store.ErrFileTooLarge) && limit < conf.MaxBytes {
				reason = full
			}
			notes = append(notes, media.NotReadLine(name, reason))
			continue
		}
		if strings.TrimSpace(a.Name) == "" || media.Ext(ref.MIME) != "" && filepath.Ext(name) == "" {
			name = strings.TrimSuffix(name, filepath.Ext(name)) + media.Ext(ref.MIME)
		}
		name = uniqueName(name, used)
		ref.Name, ref.Kind = name, a.Kind
		refs = append(refs, ref)
		if text != "" {
			text += "\n"
		}
		text += media.RefLine(ref.Name, ref.MIME, ref.Size)
	}
	return text, refs, notes, release, nil
}

// fetchFile downloads one attachment into the store within the deadline.
func (g *Gateway) fetchFile(ctx context.Context, a channels.Attachment, limit int64) (store.FileRef, error) {
	if a.Open == nil {
		return store.FileRef{}, errors.New("the channel gave no way to download it")
	}
	dctx, cancel := context.WithTimeoutCause(ctx, AttachmentDeadline, errStalled)
	defer cancel()
	rc, err := a.Open(dctx)
	if err != nil {
		if context.Cause(dctx) == errStalled {
			return store.FileRef{}, errStalled
		}
		return store.FileRef{}, fmt.Errorf("the download failed (%w)", err)
	}
	// Close ends a read the deadline cut short, on every platform's body.
	stop := context.AfterFunc(dctx, func() { rc.Close() })
	defer stop()
	defer rc.Close()
	// The image is decoded whole on its way into the store, so one cut
	// short behind a sound header never reaches a model as an image.
	chk := media.NewImageCheck()
	defer chk.Close()
	ref, err := g.db.PutFile(dctx, io.TeeReader(downloadReader{rc}, chk), limit, func(head []byte) (string, error) { return chk.Sniff(head, a.MIME) })
	if err != nil && context.Cause(dctx) == errStalled {
		return ref, errStalled
	}
	return ref, err
}

var errStalled = errors.New("the download did not finish in time")

// downloadError is a platform's download failing midway.
type downloadError struct{ err error }

func (e *downloadError) Error() string { return "the download failed (" + e.err.Error() + ")" }
func (e *downloadError) Unwrap() error { return e.err }

// downloadReader marks its read errors as the download's, not the store's.
type downloadReader struct{ r io.Reader }

func (d downloadReader) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	if err != nil && err != io.EOF {
		err = &downloadError{err}
	}
	return n, err
}

// fileProblem reports whether err is about the file or its download (the
// person is told), not the store (the message is then not taken).
func fileProblem(err error) bool {
	var de *downloadError
	return errors.Is(err, store.ErrFileTooLarge) || errors.Is(err, media.ErrCorrupt) || errors.Is(err, media.ErrTooManyPixels) || errors.Is(err, errStalled) ||
		errors.As(err, &de) || strings.HasPrefix(err.Error(), "the download failed") || strings.HasPrefix(err.Error(), "the channel gave")
}

// fileReason is the 📎 line's reason for err.
func fileReason(err error, limit int64) string {
	switch {
	case errors.Is(err, store.ErrFileTooLarge):
		return fmt.Sprintf("it is over the %s limit (attachments.maxBytes)", media.Size(limit))
	case errors.Is(err, media.ErrCorrupt):
		return media.ErrCorrupt.Error()
	case errors.Is(err, media.ErrTooManyPixels):
		return media.ErrTooManyPixels.Error()
	case errors.Is(err, errStalled):
		return fmt.Sprintf("the download did not finish within %s", AttachmentDeadline)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "the download failed") {
		msg = "it could not be read (" + msg + ")"
	}
	return msg
}

// uniqueName gives the second "a.png" of one message the name "a-2.png".
func uniqueName(name string, used map[string]bool) string {
	out := name
	for n := 2; used[out]; n++ {
		ext := filepath.Ext(name)
		out = fmt.Sprintf("%s-%d%s", strings.TrimSuffix(name, ext), n, ext)
	}
	used[out] = true
	return out
}

// turnFiles readies the files of an owed message for its turn: each is
// copied into the conversation workspace as attachments/<name>, and voice
// and audio are transcribed (attachments.transcription) into the text.
// It returns the input text and the files for the model.
func (g *Gateway) turnFiles(ctx context.Context, it store.Intake, cws string, log *zap.Logger) (string, []agent.File) {
	refs := it.Files
	if !it.FilesKnown { // a message stored before this turn's process read it
		var err error
		if refs, err = g.db.IntakeFiles(ctx, it.ID); err != nil {
			log.Warn("could not read the message's files; the turn goes on without them", zap.Error(err))
			return it.Text, nil
		}
	}
	if len(refs) == 0 {
		return it.Text, nil
	}
	text := it.Text
	var out []agent.File
	var dir *os.Root // the workspace's attachments, opened once per message
	var dirErr error
	defer func() {
		if dir != nil {
			dir.Close()
		}
	}()
	for i, r := range refs {
		if cws != "" {
			if i == 0 {
				dir, dirErr = openAttachments(cws)
			}
			err := dirErr
			if err == nil {
				err = g.copyToWorkspace(ctx, r, dir)
			}
			if err != nil && ctx.Err() == nil {
				log.Warn("could not copy a file into the conversation workspace", zap.String("file", r.Name), zap.Error(err))
				reason := errNotAFolder.Error()
				if !errors.Is(err, errNotAFolder) {
					reason = "it could not be written to the workspace (" + err.Error() + ")"
				}
				g.post(ctx, it.Origin, channels.KindSystem, media.NotReadLine(r.Name, reason), "")
				text += "\n(" + media.AttachmentsDir + "/" + r.Name + " is not in the workspace: " + reason + ")"
			}
		}
		if (r.Kind == channels.KindVoice || r.Kind == channels.KindAudio) && media.IsAudio(r.MIME) {
			text = g.transcribeInto(ctx, it, r, text, log)
		}
		out = append(out, agent.File{ID: r.ID, Name: r.Name, MIME: r.MIME, Size: r.Size, Path: media.AttachmentsDir + "/" + r.Name})
	}
	return text, out
}

// openAttachments opens the attachments folder of the conversation
// workspace cws (creating it) through an os.Root of cws, so a symbolic
// link a tool left on the way is never followed out of it; an attachments
// that is not a folder is refused (errNotAFolder), not used.
func openAttachments(cws string) (*os.Root, error) {
	root, err := os.OpenRoot(cws)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return attachmentsRoot(root)
}

// copyToWorkspace writes file r to attachments/<name> of a conversation
// workspace (dir, from openAttachments) unless the same bytes are there
// already. Every step goes through dir, so a symbolic link a tool left at
// the name is replaced, never followed.
func (g *Gateway) copyToWorkspace(ctx context.Context, r store.FileRef, dir *os.Root) error {
	if fi, err := dir.Lstat(r.Name); err == nil && fi.Mode().IsRegular() && fi.Size() == r.Size {
		return nil
	}
	rc, _, err := g.db.OpenFile(ctx, r.ID)
	if err != nil {
		return err
	}
	defer rc.Close()
	tmp, name, err := createTemp(dir, ".in-")
	if err != nil {
		return err
	}
	defer dir.Remove(name)
	if _, err := io.Copy(tmp, rc); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// Rename replaces a symbolic link a tool left at the name, never
	// following it.
	return dir.Rename(name, r.Name)
}

// errNotAFolder is a conversation workspace whose attachments entry is
// not a folder (a tool replaced it, e.g. with a symbolic link).
var errNotAFolder = errors.New("the workspace's " + media.AttachmentsDir + " is not a folder (a tool replaced it); remove it and send the file again")

// attachmentsRoot opens (creating it when missing) the attachments folder
// of the conversation workspace root, refusing anything but a folder.
func attachmentsRoot(root *os.Root) (*os.Root, error) {
	fi, err := root.Lstat(media.AttachmentsDir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := root.Mkdir(media.AttachmentsDir, tools.DirMode); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		fi, err = root.Lstat(media.AttachmentsDir)
	}
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, errNotAFolder
	}
	dir, err := root.OpenRoot(media.AttachmentsDir)
	if err != nil {
		return nil, err
	}
	// Swapped for a link between the Lstat and the open: the link was
	// followed only inside root, yet it is still not the folder.
	if st, err := dir.Stat("."); err != nil || !os.SameFile(st, fi) {
		dir.Close()
		return nil, errNotAFolder
	}
	return dir, nil
}

// createTemp creates a new file named prefix plus random digits in dir,
// mode 0600, and returns it with its name.
func createTemp(dir *os.Root, prefix string) (*os.File, string, error) {
	for range 10000 {
		name := prefix + strconv.FormatUint(rand.Uint64(), 36)
		f, err := dir.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, tools.FileMode)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, name, err
	}
	return nil, "", errors.New("no free temporary name")
}

// sweepFiles removes, every hour, the files no conversation named for
// attachments.retentionDays. It runs until ctx ends (its owner waits).
func (g *Gateway) sweepFiles(ctx context.Context) {
	for {
		days := g.cfg().Attachments.RetentionDays
		if days > 0 {
			n, err := g.db.SweepFiles(ctx, g.clock.Now().Add(-time.Duration(days)*24*time.Hour))
			switch {
			case err != nil && ctx.Err() == nil:
				g.log.Warn("file retention sweep", zap.Error(err))
			case n > 0:
				g.log.Info("removed files past attachments.retentionDays", zap.Int("files", n), zap.Int("retentionDays", days))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(fileSweepEvery):
		}
	}
}

// transcribeInto puts the transcript of voice or audio file r in front of
// the message text (attachments.transcription): the transcript is what
// the person said. A failed transcription leaves the file's reference
// line and says why.
func (g *Gateway) transcribeInto(ctx context.Context, it store.Intake, r store.FileRef, text string, log *zap.Logger) string {
	conf := g.cfg().Attachments.Transcription
	if !conf.Enabled() {
		return text
	}
	p, ok := g.cfg().Models.Providers[conf.Provider]
	if !ok {
		return text
	}
	rc, _, err := g.db.OpenFile(ctx, r.ID)
	if err != nil {
		log.Warn("voice message not transcribed: file not readable", zap.Error(err))
		return text
	}
	defer rc.Close()
	// Transcription is spend (issue 35): checked against the budgets
	// before, counted after at models[].cost.perMinute.
	call := turnSpend(it.SessionKey, it.AgentID, it.ID, it.Text)
	if err := g.spend.Check(call); err != nil {
		log.Info("voice message not transcribed: a budget is reached", zap.Error(err))
		return text + "\n(" + r.Name + " was not transcribed: " + err.Error() + ")"
	}
	tctx, cancel := context.WithTimeout(ctx, AttachmentDeadline)
	defer cancel()
	transcript, secs, err := providers.Transcribe(tctx, g.provOpts.HTTPClient, p, conf.Model, r.Name, r.MIME, rc)
	if err == nil {
		if secs <= 0 {
			secs = float64(r.Size) / (16_000 / 8) // unknown length: 16 kbit/s, a voice note's rate
		}
		ref := conf.Provider + "/" + conf.Model
		perMinute := 0.0
		if _, _, m, ok := g.cfg().LookupModel(ref); ok && m.Cost != nil {
			perMinute = m.Cost.PerMinute
		}
		g.spend.Record(context.WithoutCancel(ctx), call, ref, perMinute*secs/60, agent.Usage{})
	}
	if err != nil {
		log.Warn("voice message not transcribed", zap.String("file", r.Name), zap.Error(err))
		return text + "\n(" + r.Name + " could not be transcribed: " + err.Error() + ")"
	}
	log.Debug("voice message transcribed", zap.String("file", r.Name), zap.Int("chars", len(transcript)))
	if transcript == "" {
		return text
	}
	return transcript + "\n" + text
}

// openFile reads a stored file (agent.Turn.OpenFile).
func (g *Gateway) openFile(ctx context.Context, id string) (io.ReadCloser, error) {
	rc, _, err := g.db.OpenFile(ctx, id)
	return rc, err
}

// webFiles serves the web chat's files: a file is the client's when its
// conversation (the client's session) names it.
type webFiles struct{ g *Gateway }

func (w webFiles) OpenFile(ctx context.Context, client, id string) (io.ReadCloser, web.File, error) {
	o := channels.Origin{Channel: web.Name, ChatID: client, ChatType: channels.ChatDM}
	key := string(ids.Requester(route(w.g.cfg(), o), o))
	if !store.ValidFileID(id) {
		return nil, web.File{}, web.ErrNoFile
	}
	named, err := w.g.db.FileNamed(ctx, id, key)
	if err != nil {
		return nil, web.File{}, err
	}
	if !named {
		return nil, web.File{}, web.ErrNoFile
	}
	rc, ref, err := w.g.db.OpenFile(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, web.File{}, web.ErrNoFile
	}
	if err != nil {
		return nil, web.File{}, err
	}
	return rc, web.File{ID: id, MIME: ref.MIME, Size: ref.Size}, nil
}

// attachedFiles holds the files send_file attached during a turn or run,
// by session key, until its reply or announce is written.
type attachedFiles struct {
	mu sync.Mutex
	m  map[string][]store.FileRef
}

// maxAttached bounds the files one turn or run may attach.
const maxAttached = 20

func (a *attachedFiles) add(key string, f store.FileRef) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[string][]store.FileRef{}
	}
	if len(a.m[key]) >= maxAttached {
		return fmt.Errorf("a reply takes at most %d files", maxAttached)
	}
	for _, old := range a.m[key] {
		if old.ID == f.ID && old.Name == f.Name {
			return nil // attached already
		}
	}
	a.m[key] = append(a.m[key], f)
	return nil
}

// take returns and forgets the files attached for key.
func (a *attachedFiles) take(key string) []store.FileRef {
	a.mu.Lock()
	defer a.mu.Unlock()
	files := a.m[key]
	delete(a.m, key)
	return files
}

// putOutgoing stores a file the model sends (send_file) or hands to a
// child (sessions_spawn attachments), typed by its content: an image that
// does not decode whole is sent as a file, not shown as an image.
func (g *Gateway) putOutgoing(ctx context.Context, r io.Reader, limit int64) (store.FileRef, error) {
	chk := media.NewImageCheck()
	defer chk.Close()
	return g.db.PutFile(ctx, io.TeeReader(r, chk), limit, func(head []byte) (string, error) {
		t, err := chk.Sniff(head, "")
		if errors.Is(err, media.ErrCorrupt) || errors.Is(err, media.ErrTooManyPixels) {
			return "application/octet-stream", nil
		}
		return t, err
	})
}

// fileSink is send_file's store: the file is streamed into the store
// (attachments.maxBytes) and attached to the caller's reply or announce.
type fileSink struct{ g *Gateway }

func (s fileSink) AttachFile(ctx context.Context, cc agent.CallContext, name, caption string, r io.Reader) (int64, string, error) {
	limit := s.g.cfg().Attachments.MaxBytes
	ref, err := s.g.putOutgoing(ctx, r, limit)
	if errors.Is(err, store.ErrFileTooLarge) {
		return 0, "", fmt.Errorf("it is over the %s limit (attachments.maxBytes)", media.Size(limit))
	}
	if err != nil {
		return 0, "", err
	}
	ref.Name, ref.Caption = media.SafeName(name, ref.MIME), caption
	if err := s.g.attached.add(cc.SessionKey, ref); err != nil {
		return 0, "", err
	}
	return ref.Size, ref.MIME, nil
}

// workspaceFile stores the file at path of conversation workspace ws
// (sessions_spawn's attachments): a relative path that stays inside it,
// through no symbolic link.
func (g *Gateway) workspaceFile(ctx context.Context, ws, path string) (agent.File, error) {
	rel := filepath.ToSlash(filepath.Clean(path))
	if filepath.IsAbs(path) || !filepath.IsLocal(rel) {
		return agent.File{}, errors.New("give a path relative to the workspace, inside it (e.g. attachments/chart.png)")
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		return agent.File{}, err
	}
	defer root.Close()
	fi, err := root.Lstat(rel)
	if err != nil {
		return agent.File{}, errors.New("no such file in the workspace")
	}
	if !fi.Mode().IsRegular() {
		return agent.File{}, errors.New("not a regular file")
	}
	f, _, err := tools.OpenRegular(root, rel, os.O_RDONLY, 0)
	if err != nil {
		return agent.File{}, err
	}
	defer f.Close()
	limit := g.cfg().Attachments.MaxBytes
	ref, err := g.putOutgoing(ctx, f, limit)
	if errors.Is(err, store.ErrFileTooLarge) {
		return agent.File{}, fmt.Errorf("it is over the %s limit (attachments.maxBytes)", media.Size(limit))
	}
	if err != nil {
		return agent.File{}, err
	}
	return agent.File{ID: ref.ID, Name: fi.Name(), MIME: ref.MIME, Size: ref.Size, Path: rel}, nil
}
