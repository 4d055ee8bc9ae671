package reload

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
)

// Options configure a Watcher. Path and Apply are required.
type Options struct {
	// Path is the rules file or directory, as given to rules.Load.
	Path string
	// Apply installs rules that loaded cleanly; Server.SetRules fits. It is
	// never called with nil or with rules that failed to load.
	Apply func(*rules.Set)
	// Logger gets one line per load; default no logging.
	Logger *zap.Logger
	// Debounce is how long the watched directory must be quiet before a
	// change is loaded, so an editor's or kubelet's burst of events gives
	// one load; default 200ms. A burst that never quiets is still loaded
	// 5*Debounce after its first event.
	Debounce time.Duration
	// OnReload is told the result of every load, nil on success;
	// metrics.Recorder.ObserveReload fits. nil tells nothing.
	OnReload func(err error)
	// Now stamps the status; default time.Now.
	Now func() time.Time
	// MergeDomains asks rules loading to merge files of the same domain,
	// as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG, instead of refusing
	// them.
	MergeDomains bool
}

// Watcher loads rules again when their files change (Run) or when asked
// (Reload, for SIGHUP). A load that fails keeps the last good rules serving
// and is recorded in Status until a later load succeeds. Its methods are
// safe for concurrent use.
type Watcher struct {
	o      Options
	log    *zap.Logger
	mu     sync.Mutex // one load at a time, so an older load never lands last
	loaded bool       // some rules were applied; under mu
	status atomic.Pointer[Status]

	// watching is closed once Run watches the paths, for tests.
	watching     chan struct{}
	watchingOnce sync.Once
	// target is the rules file's symlink target when it is outside the
	// rules directory, else ""; used by Run only.
	target string
	// isDir is whether Path was a directory when Run started; Run only.
	isDir bool
}

// Status is the outcome of the loads so far.
type Status struct {
	// LastReload is when rules last loaded cleanly; zero before the first.
	LastReload time.Time
	// LastError is the failure of the last load; nil once a later one
	// succeeds.
	LastError *Failure
}

// Failure describes a failed load, as GET /rules shows it.
type Failure struct {
	Time time.Time `json:"time"`
	// Err is the error: for bad rules, every problem as file:line: field:
	// message.
	Err string `json:"error"`
	// Files are the files with problems.
	Files []string `json:"files"`
}

// New returns a Watcher for o; it loads nothing until Reload or Run.
func New(o Options) (*Watcher, error) {
	if o.Path == "" {
		return nil, errors.New("reload: Options.Path is empty")
	}
	if o.Apply == nil {
		return nil, errors.New("reload: Options.Apply is nil")
	}
	if o.Debounce <= 0 {
		o.Debounce = 200 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	r := &Watcher{o: o, log: o.Logger, watching: make(chan struct{})}
	r.status.Store(&Status{})
	return r, nil
}

// Status returns the outcome of the loads so far.
func (r *Watcher) Status() Status { return *r.status.Load() }

// RulesStatus is Status as GET /rules shows it beside the rules:
// "last_reload" (RFC 3339, absent before the first good load) and
// "last_reload_error" (null when the last load succeeded). It fits
// httpapi.Options.RulesStatus.
func (r *Watcher) RulesStatus() map[string]any {
	st := r.Status()
	out := map[string]any{"last_reload_error": st.LastError}
	if !st.LastReload.IsZero() {
		out["last_reload"] = st.LastReload
	}
	return out
}

// Reload loads the rules now and applies them if they are good. It returns
// the load's error, an *rules.Error for bad rules; the last good rules keep
// serving then.
func (r *Watcher) Reload(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	set, err := rules.Options{MergeDomains: r.o.MergeDomains}.Load(r.o.Path)
	now := r.o.Now()
	if err != nil {
		last := r.Status().LastReload
		r.status.Store(&Status{LastReload: last, LastError: newFailure(now, err)})
		msg := "rules failed to load"
		if r.loaded {
			msg = "rules failed to load; serving the last good rules"
		}
		r.log.Error(msg, zap.String("path", r.o.Path), zap.Strings("problems", problemStrings(err)))
		if r.o.OnReload != nil {
			r.o.OnReload(err)
		}
		return err
	}
	r.o.Apply(set)
	r.loaded = true
	r.status.Store(&Status{LastReload: now})
	r.log.Info("rules loaded", zap.String("path", r.o.Path), zap.Strings("domains", set.Domains()), zap.Strings("files", set.Files()))
	if r.o.OnReload != nil {
		r.o.OnReload(nil)
	}
	return nil
}

func newFailure(now time.Time, err error) *Failure {
	e := &Failure{Time: now, Err: err.Error(), Files: []string{}}
	var re *rules.Error
	if errors.As(err, &re) {
		for _, p := range re.Problems {
			if !slices.Contains(e.Files, p.File) {
				e.Files = append(e.Files, p.File)
			}
		}
	}
	return e
}

// problemStrings lists a load error's problems one per string, for logs.
func problemStrings(err error) []string {
	var re *rules.Error
	if !errors.As(err, &re) {
		return []string{err.Error()}
	}
	out := make([]string, len(re.Problems))
	for i, p := range re.Problems {
		out[i] = p.Error()
	}
	return out
}

// watchCheck is how often Run makes sure its watches still exist: inotify
// drops a watch whose directory is deleted or moved, and events can be
// missed while one is being added back.
const watchCheck = time.Second

// Run watches the rules and reloads them, debounced, when a rule file, or a
// ConfigMap's "..data", changes in the directory holding them (the file's
// directory, or the directory itself) until ctx ends. Watching the
// directory, not the file, follows editors that replace files and
// Kubernetes ConfigMap volumes, whose files are symlinks through a "..data"
// symlink that kubelet swaps with a rename.
// The parent directory is watched too, so a directory that is itself
// replaced is watched again and reloaded. Run does not load at start: call
// Reload first. It returns nil when ctx ends, or an error when nothing can
// be watched.
func (r *Watcher) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("reload: watch %s: %w", r.o.Path, err)
	}
	defer w.Close()
	st, err := os.Stat(r.o.Path)
	r.isDir = err == nil && st.IsDir()
	dir, parent := r.dirs()
	if r.sync(w); len(w.WatchList()) == 0 {
		return fmt.Errorf("reload: watch %s: cannot watch %s or %s", r.o.Path, dir, parent)
	}
	r.watchingOnce.Do(func() { close(r.watching) })

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	check := time.NewTicker(watchCheck)
	defer check.Stop()
	var pending bool
	var first time.Time
	schedule := func() {
		now := time.Now()
		if !pending {
			pending, first = true, now
		}
		wait := min(r.o.Debounce, time.Until(first.Add(5*r.o.Debounce)))
		timer.Reset(max(wait, 0))
	}
	for {
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if !r.relevant(ev.Name, dir) {
				continue
			}
			r.log.Debug("rules changed", zap.String("name", ev.Name), zap.String("op", ev.Op.String()))
			schedule()
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			r.log.Warn("watching rules", zap.Error(err))
			schedule() // events may be lost (overflow): look anyway
		case <-timer.C:
			pending = false
			r.sync(w)
			r.Reload(ctx) // logged and recorded
		case <-check.C:
			if r.sync(w) {
				schedule()
			}
		}
	}
}

// relevant reports whether an event on name can change what rules.Load
// reads: the rules directory itself, a rule file (every *.yaml and *.yml of
// a directory, else the file), the file's symlink target, or a ConfigMap's
// "..data", "..data_tmp" and timestamped directories. Other names, such as a
// log file written beside the rules, are ignored: reacting to them could
// reload in a loop.
func (r *Watcher) relevant(name, dir string) bool {
	if name == dir || name == r.target {
		return true
	}
	if filepath.Dir(name) != dir {
		return false // the parent's other entries, or the target's siblings
	}
	base := filepath.Base(name)
	if strings.HasPrefix(base, "..") {
		return true
	}
	if r.isDir {
		ext := filepath.Ext(base)
		return !strings.HasPrefix(base, ".") && (ext == ".yaml" || ext == ".yml")
	}
	return base == filepath.Base(r.o.Path)
}

// dirs returns the directory whose entries hold the rules and its parent.
func (r *Watcher) dirs() (dir, parent string) {
	dir = filepath.Clean(r.o.Path)
	if !r.isDir {
		dir = filepath.Dir(dir)
	}
	return dir, filepath.Dir(dir)
}

// wanted returns the directories to watch: the rules directory, its parent,
// and, when the rules file is a symlink elsewhere (not through ..data in the
// same directory), the directory of its target; and that target.
func (r *Watcher) wanted() (paths []string, target string) {
	dir, parent := r.dirs()
	paths = []string{dir}
	if parent != dir {
		paths = append(paths, parent)
	}
	if t, err := filepath.EvalSymlinks(r.o.Path); err == nil {
		if st, err := os.Stat(t); err == nil && !st.IsDir() {
			if td := filepath.Dir(t); !isUnder(td, dir) {
				target = t
				if !slices.Contains(paths, td) {
					paths = append(paths, td)
				}
			}
		}
	}
	return paths, target
}

// isUnder reports whether path is dir or inside it, such as ConfigMap
// timestamped directories, whose changes the rules directory already shows.
func isUnder(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// sync adds the watches that are missing, the first ones included, and
// drops the ones no longer wanted. It reports whether it added a watch
// after the first sync, when a directory may have changed unseen.
func (r *Watcher) sync(w *fsnotify.Watcher) (added bool) {
	have := w.WatchList()
	want, target := r.wanted()
	r.target = target
	for _, p := range want {
		if slices.Contains(have, p) {
			continue
		}
		if err := w.Add(p); err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				r.log.Warn("watching rules", zap.String("dir", p), zap.Error(err))
			}
			continue
		}
		added = added || len(have) > 0
	}
	for _, p := range have {
		if !slices.Contains(want, p) {
			w.Remove(p)
		}
	}
	return added
}
