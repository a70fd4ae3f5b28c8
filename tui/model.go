package tui

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/partitionq/partitionq/partitionq"
)

// component is one view of the console. Each has its own key map (shown
// by the help line) and is sized by the root with SetSize.
type component interface {
	help.KeyMap
	SetSize(width, height int)
	Update(msg tea.Msg) tea.Cmd
	View() string
	// capturing says a text input has the keyboard: the global keys are
	// off, so typing "q" in a reason does not quit.
	capturing() bool
}

// tab is one of the console's top-level views.
type tab int

const (
	tabSlots tab = iota
	tabBlocked
	tabDead
	tabAudit
	tabHot
	tabs
)

// Model is the console's root model. Its Update routes messages to the
// components that own them and keeps the refresh loop going; it holds no
// view logic of its own. Use it from one goroutine (Bubble Tea's).
type Model struct {
	sh     *shared
	keys   globalKeys
	help   help.Model
	w, h   int
	active tab

	slots   *slotsView
	blocked *blockedView
	detail  *keyDetail
	dead    *deadView
	audit   *auditView
	hot     *hotKeysView
	confirm *confirmDialog
	keyv    *keyView    // "/": find a key
	groups  *groupsView // every group, when no group is open

	detailOpen  bool // the key detail covers the blocked keys tab
	confirmOpen bool // the confirm dialog covers everything
	keyOpen     bool // the key view covers the tabs
	groupsMode  bool // the list of every group shows, no group is open

	ref   refresher
	last  snapshotMsg // the latest good snapshot, for the header and tabs
	group error       // the queue or group does not exist
	flash flash
}

// refresher is the state of the refresh loop: one fetch in flight at a
// time, then a tick re-arms it. A tick of an older generation is stale.
type refresher struct {
	gen      int
	inFlight bool
	again    bool // a refresh was asked while one was in flight
	failures int  // consecutive failed refreshes
	err      error
	errSince time.Time
	next     time.Duration // the wait before the next refresh
}

// flash is the one-line result of the latest action. It shows the time
// the answer came, and goes after FlashFor (checked at each refresh).
type flash struct {
	sev  severity
	text string
	at   time.Time // when the library answered (zero while it works on it)
}

// FlashFor is how long the result of an action stays on screen.
const FlashFor = 30 * time.Second

// NewModel returns the console's model for c and opts, for tests and for
// embedding in another Bubble Tea program; Run is the usual entry point.
// ctx governs the calls the model's commands make. It logs nowhere.
func NewModel(ctx context.Context, c Client, opts Options) (*Model, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return newModel(ctx, c, opts, slog.New(slog.NewTextHandler(io.Discard, nil))), nil
}

func newModel(ctx context.Context, c Client, opts Options, log *slog.Logger) *Model {
	sh := &shared{ctx: ctx, client: c, queue: opts.Queue, group: opts.Group, actor: opts.Actor, readOnly: opts.ReadOnly,
		refresh: opts.Refresh, refreshLimit: opts.RefreshTimeout, styles: defaultStyles(), log: log.With(slog.String("queue", opts.Queue), slog.String("group", opts.Group)), baseLog: log,
		now: time.Now, after: tick}
	h := help.New()
	h.ShortSeparator = " · "
	m := &Model{sh: sh, keys: newGlobalKeys(), help: h, groups: newGroupsView(sh), groupsMode: opts.Queue == ""}
	m.newGroupViews()
	return m
}

// newGroupViews gives the model fresh views of the group in sh.
func (m *Model) newGroupViews() {
	sh := m.sh
	m.slots, m.blocked, m.detail = newSlotsView(sh), newBlockedView(sh), newKeyDetail(sh)
	m.dead, m.audit, m.confirm, m.keyv = newDeadView(sh), newAuditView(sh), newConfirmDialog(sh), newKeyView(sh)
	m.hot = newHotKeysView(sh)
	m.active, m.detailOpen, m.confirmOpen, m.keyOpen = tabSlots, false, false, false
	m.last, m.group, m.flash = snapshotMsg{}, nil, flash{}
}

// openGroup leaves the list of groups for one group's views.
func (m *Model) openGroup(queue, group string) tea.Cmd {
	m.sh.queue, m.sh.group = queue, group
	m.sh.log = m.sh.baseLog.With(slog.String("queue", queue), slog.String("group", group))
	m.newGroupViews()
	m.groupsMode = false
	m.layout()
	return m.refreshNow()
}

// showGroups goes back to the list of every group.
func (m *Model) showGroups() tea.Cmd {
	m.groupsMode, m.confirmOpen = true, false
	return m.refreshNow()
}

// Init starts the refresh loop.
func (m *Model) Init() tea.Cmd { return m.refreshNow() }

// Update routes a message to its handler or to the focused component.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	defer m.layout()
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.w, m.h = msg.Width, msg.Height
		return m, nil
	case tea.KeyMsg:
		if msg.Type == tea.KeyRunes && len(msg.Runes) > 1 && !msg.Paste && !m.focused().capturing() {
			// Keys typed fast (or over a laggy link) come as one message:
			// each is a key of its own.
			return m, m.eachRune(msg)
		}
		return m, m.onKey(msg)
	case tickMsg:
		return m, m.onTick(msg)
	case snapshotMsg:
		return m, m.onSnapshot(msg)
	case refreshNowMsg:
		return m, m.refreshNow()
	case openKeyMsg, closeKeyMsg, showSlotKeysMsg:
		return m, m.navigate(msg)
	case confirmMsg, cancelConfirmMsg, runActionMsg, actionMsg:
		return m, m.onAction(msg)
	case bulkPreviewMsg:
		return m, m.confirm.Update(msg)
	case closeFindMsg:
		m.keyOpen = false
		m.keyv.key = ""
		return m, nil
	case openGroupMsg:
		return m, m.openGroup(msg.queue, msg.group)
	}
	return m, m.focused().Update(msg)
}

// focused is the component that gets the keys.
func (m *Model) focused() component {
	switch {
	case m.confirmOpen:
		return m.confirm
	case m.groupsMode:
		return m.groups
	case m.keyOpen:
		return m.keyv
	case m.active == tabBlocked && m.detailOpen:
		return m.detail
	}
	return m.tab(m.active)
}

func (m *Model) tab(t tab) component {
	return [...]component{m.slots, m.blocked, m.dead, m.audit, m.hot}[t]
}

func (m *Model) onKey(msg tea.KeyMsg) tea.Cmd {
	if key.Matches(msg, m.keys.ForceQuit) {
		return tea.Quit
	}
	f := m.focused()
	if f.capturing() {
		return f.Update(msg)
	}
	switch {
	case key.Matches(msg, m.keys.Quit):
		return tea.Quit
	case key.Matches(msg, m.keys.Help):
		m.help.ShowAll = !m.help.ShowAll
	case key.Matches(msg, m.keys.Refresh):
		return m.refreshNow()
	case m.groupsMode:
		return f.Update(msg) // the list of groups has no tabs
	case key.Matches(msg, m.keys.Groups):
		return m.showGroups()
	case key.Matches(msg, m.keys.Find):
		m.keyOpen = true
		return m.keyv.prompt()
	case key.Matches(msg, m.keys.NextTab):
		return m.switchTo((m.active + 1) % tabs)
	case key.Matches(msg, m.keys.PrevTab):
		return m.switchTo((m.active + tabs - 1) % tabs)
	case key.Matches(msg, m.keys.Slots):
		return m.switchTo(tabSlots)
	case key.Matches(msg, m.keys.Blocked):
		return m.switchTo(tabBlocked)
	case key.Matches(msg, m.keys.Dead):
		return m.switchTo(tabDead)
	case key.Matches(msg, m.keys.Audit):
		return m.switchTo(tabAudit)
	case key.Matches(msg, m.keys.Hot):
		return m.switchTo(tabHot)
	default:
		return f.Update(msg)
	}
	return nil
}

// eachRune handles the runes of one key message as one key each, in order.
func (m *Model) eachRune(msg tea.KeyMsg) tea.Cmd {
	var cmds []tea.Cmd
	for i, r := range msg.Runes {
		one := tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}, Alt: msg.Alt && i == 0}
		if m.focused().capturing() { // a key just opened a text input: the rest is typed into it
			one.Runes = msg.Runes[i:]
			cmds = append(cmds, m.onKey(one))
			break
		}
		cmds = append(cmds, m.onKey(one))
		m.layout()
	}
	return tea.Batch(cmds...)
}

func (m *Model) switchTo(t tab) tea.Cmd {
	if t == m.active && !m.keyOpen {
		return nil
	}
	m.active, m.keyOpen = t, false
	if t == tabDead || t == tabAudit || t == tabHot {
		return m.refreshNow() // their data is read only while they show
	}
	return nil
}

// navigate handles the components' navigation intents.
func (m *Model) navigate(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case openKeyMsg:
		m.detail.open(msg.key)
		m.detailOpen = true
		return m.refreshNow() // reads its waiting events
	case closeKeyMsg:
		m.detailOpen = false
	case showSlotKeysMsg:
		m.active, m.detailOpen = tabBlocked, false
		return m.blocked.Update(msg)
	}
	return nil
}

// plan says what the next refresh reads for the views that show.
func (m *Model) plan() fetchPlan {
	if m.groupsMode {
		return fetchPlan{groups: true}
	}
	p := fetchPlan{deadLetters: m.active == tabDead, deadAll: m.dead.all, deadFilter: m.dead.filterExpr, audit: m.active == tabAudit, hotKeys: m.active == tabHot}
	if m.keyOpen {
		p.findKey = m.keyv.key
	}
	if m.confirmOpen {
		p.previewKey = m.confirm.previewKey()
	}
	if p.previewKey == "" && m.detailOpen {
		p.previewKey = m.detail.key.Key
	}
	return p
}

// refreshNow refreshes at once (or right after the refresh in flight),
// and makes any armed tick stale.
func (m *Model) refreshNow() tea.Cmd {
	m.ref.gen++
	if m.ref.inFlight {
		m.ref.again = true
		return nil
	}
	m.ref.inFlight = true
	return fetch(m.sh, m.plan())
}

func (m *Model) onTick(msg tickMsg) tea.Cmd {
	if msg.gen != m.ref.gen || m.ref.inFlight {
		return nil
	}
	m.ref.inFlight = true
	return fetch(m.sh, m.plan())
}

func (m *Model) onSnapshot(msg snapshotMsg) tea.Cmd {
	m.ref.inFlight = false
	if msg.plan.groups != m.groupsMode || (!m.groupsMode && msg.queue != "" && (msg.queue != m.sh.queue || msg.group != m.sh.group)) {
		// Read before the console switched between groups: read again.
		m.ref.again, m.ref.inFlight = false, true
		return fetch(m.sh, m.plan())
	}
	switch {
	case msg.err == nil:
		if m.ref.err != nil {
			m.sh.log.Info("database answers again", slog.Int("failed_refreshes", m.ref.failures))
		}
		m.ref.failures, m.ref.err, m.last, m.group = 0, nil, msg, nil
		if !m.flash.at.IsZero() && msg.at.Sub(m.flash.at) >= FlashFor {
			m.flash = flash{}
		}
	case isGroupMissing(msg.err):
		m.ref.failures, m.ref.err, m.group = 0, nil, msg.err
	default:
		if m.ref.failures == 0 {
			m.ref.errSince = msg.at
		}
		m.ref.failures++
		m.ref.err = msg.err
		m.sh.log.Warn("refresh failed", slog.Int("attempt", m.ref.failures), slog.Any("err", msg.err))
	}
	var cmds []tea.Cmd
	views := []component{m.slots, m.blocked, m.detail, m.dead, m.audit, m.hot, m.confirm, m.keyv}
	if m.groupsMode {
		views = []component{m.groups}
	}
	for _, c := range views {
		cmds = append(cmds, c.Update(msg))
	}
	if m.ref.again {
		m.ref.again = false
		m.ref.inFlight = true
		return tea.Batch(append(cmds, fetch(m.sh, m.plan()))...)
	}
	m.ref.next = m.sh.refresh
	if m.ref.failures > 0 {
		m.ref.next = min(m.sh.refresh<<min(m.ref.failures-1, 16), max(BackoffMax, m.sh.refresh))
	}
	m.ref.gen++
	return tea.Batch(append(cmds, m.sh.after(m.ref.next, tickMsg{gen: m.ref.gen}))...)
}

// onAction opens and closes the confirm dialog, runs actions and shows
// their results.
func (m *Model) onAction(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case confirmMsg:
		if m.sh.readOnly {
			return nil
		}
		m.confirmOpen = true
		if msg.req.kind.bulk() {
			return tea.Batch(m.confirm.open(msg.req), dryRun(m.sh, msg.req))
		}
		return tea.Batch(m.confirm.open(msg.req), m.refreshNow())
	case cancelConfirmMsg:
		m.confirmOpen = false
	case runActionMsg:
		if m.sh.readOnly {
			return nil
		}
		m.confirmOpen = false
		if msg.req.action() == partitionq.AuditRetry && msg.req.key.State == partitionq.KeyDraining {
			m.flash = drainingRetryFlash(msg.req)
			m.flash.at = m.last.at
			return nil
		}
		m.flash = flash{sev: sevNone, text: pendingText(msg.req)}
		m.sh.log.Info("action", slog.String("action", msg.req.verb()), slog.String("key", actionKey(msg.req)),
			slog.Int64("event_id", msg.req.key.Head.ID), slog.Int64("dead_letter_id", msg.req.dead.ID), slog.String("filter", msg.req.filter),
			slog.String("reason", msg.req.reason))
		return act(m.sh, msg.req)
	case actionMsg:
		m.flash = resultFlash(msg)
		m.flash.at = msg.at
		m.sh.log.Info("action result", slog.String("action", msg.req.verb()), slog.String("key", actionKey(msg.req)),
			slog.String("outcome", string(msg.result.Outcome)+string(msg.replay.Outcome)), slog.Int("count", msg.bulk.Count), slog.Any("err", msg.err))
		if msg.err == nil && msg.req.kind == actKeyHead && msg.req.row.Resolves {
			// The key is resolved (the table says so of the action).
			if m.detail.key.Key == msg.req.key.Key {
				m.detailOpen = false // back to the inbox
			}
			m.blocked.resolvedHere = msg.req.key.Key // it leaves the list as the operator meant
		}
		return m.refreshNow()
	}
	return nil
}

func actionKey(r actionRequest) string {
	if r.kind == actReplay {
		return r.dead.Key
	}
	return r.key.Key
}
