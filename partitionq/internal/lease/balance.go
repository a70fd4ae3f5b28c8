package lease

import (
	"slices"
	"sort"
)

// Balancing: identical workers share a generation's slots by agreement,
// with no coordinator. Every worker of a group reads the same picture (the
// group's live workers and who owns, or is about to own, each slot) and
// computes the same plan from it; each then does only its own part of the
// plan: it takes the free slots the plan gives it and hands the slots it
// must give up to the worker the plan names (a graceful handover: the slot
// is reserved for that worker, drained, released, and taken by it). Since
// every worker computes the same plan, two workers never reach for the
// same free slot while their pictures agree, and when they do not (a
// worker joined between two reads) the claim's row locks decide and the
// next step mends the rest.
//
// The shares: the P balancing workers (members) share the slots that no
// live pinned worker wants, each floor or ceil of that count over P. Who
// gets the ceil is sticky: the members that hold the most now, then the
// lowest member token, so that a steady membership moves nothing and a
// join or a leave moves only what the new shares need. A pinned worker
// takes the slots it lists when they are free (or reserved for it); a
// balancing worker that holds one of them hands it over.

// View is one step's picture of a generation's slots and the group's live
// workers.
type View struct {
	// Slots are the generation's slots that exist (a resize hands old ones
	// off and deletes their rows), by slot number.
	Slots []SlotView
	// Members are the group's live workers with a member token: the
	// balancing ones (Pins nil) of any generation, and the pinned ones of
	// this generation.
	Members []Member
}

// SlotView is one slot as a step sees it.
type SlotView struct {
	Slot int
	// Owner is the member token of the slot's owner while its lease lasts
	// ("" when the slot is free or its owner's lease expired); Other is set
	// instead when the live owner has no member token (a worker of an
	// older partitionq): the slot is not free, and not shared out.
	Owner string
	Other bool
	// To is the live member the slot is reserved for (a handoff in
	// progress, or done and not yet claimed); "" when none or when that
	// member is gone.
	To string
}

// Member is one live worker of the group, by its member token.
type Member struct {
	Token string
	// Pins are the slots a pinned worker runs (only these); nil for a
	// balancing worker.
	Pins []int
}

// Move hands a slot to another member.
type Move struct {
	Slot int
	To   string
}

// Plan is one member's part of a step.
type Plan struct {
	// Take are the slots to claim now: free ones the plan gives this
	// member, and those reserved for it and released.
	Take []int
	// Give are the slots this member holds and hands over (at most the
	// step's limit of moves in flight).
	Give []Move
	// Share is the number of slots this member should hold once the plan
	// is done (for a pinned member, its pins that exist).
	Share int
	// Balancing members and Shared slots: what the shares are made of.
	Members, Shared int
}

// assigned is where a slot is going: the member it is reserved for, else
// its live owner, else nobody ("").
func (s SlotView) assigned() string {
	if s.To != "" {
		return s.To
	}
	return s.Owner
}

// Shares returns the share of each balancing member of v (the slots it
// should hold once the moves are done), by token.
func Shares(v View) map[string]int {
	st := newState(v)
	out := make(map[string]int, len(st.members))
	for i, m := range st.members {
		out[m] = st.target[i]
	}
	return out
}

// state is the shared computation of a step: every member computes the
// same one from the same View.
type state struct {
	pinnedBy map[int]string // slot -> the pinned member that wants it (lowest token)
	members  []string       // balancing members, by token
	count    []int          // slots assigned to each (outside the pinned slots)
	target   []int          // each one's share
	free     []int          // shared slots assigned to nobody, by slot
	shared   int
}

func newState(v View) *state {
	st := &state{pinnedBy: map[int]string{}}
	exists := map[int]bool{}
	for _, s := range v.Slots {
		exists[s.Slot] = true
	}
	pinned := map[string]bool{}
	ms := slices.Clone(v.Members)
	sort.Slice(ms, func(i, j int) bool { return ms[i].Token < ms[j].Token })
	for _, m := range ms {
		if m.Pins == nil {
			if len(st.members) == 0 || st.members[len(st.members)-1] != m.Token {
				st.members = append(st.members, m.Token)
			}
			continue
		}
		pinned[m.Token] = true
		for _, s := range m.Pins {
			if _, taken := st.pinnedBy[s]; !taken && exists[s] {
				st.pinnedBy[s] = m.Token
			}
		}
	}
	idx := make(map[string]int, len(st.members))
	for i, m := range st.members {
		idx[m] = i
	}
	st.count = make([]int, len(st.members))
	for _, s := range v.Slots {
		if _, ok := st.pinnedBy[s.Slot]; ok {
			continue
		}
		a := s.assigned()
		if i, ok := idx[a]; ok {
			st.count[i]++
			st.shared++
			continue
		}
		if s.Other || pinned[a] {
			continue // held by a worker outside the shares
		}
		st.free = append(st.free, s.Slot)
		st.shared++
	}
	sort.Ints(st.free)
	st.target = make([]int, len(st.members))
	if p := len(st.members); p > 0 {
		lo, rem := st.shared/p, st.shared%p
		rank := make([]int, p)
		for i := range rank {
			rank[i] = i
		}
		// The ceil shares go to those that hold the most now (sticky), then
		// to the lowest tokens.
		sort.SliceStable(rank, func(a, b int) bool { return st.count[rank[a]] > st.count[rank[b]] })
		for k, i := range rank {
			st.target[i] = lo
			if k < rem {
				st.target[i]++
			}
		}
	}
	return st
}

// PlanFor computes member me's part of a step on v. maxMoving bounds the
// slots me hands over at once (those reserved for others and not yet
// released count).
func PlanFor(v View, me string, maxMoving int) Plan {
	st := newState(v)
	p := Plan{Members: len(st.members), Shared: st.shared}
	var pins []int
	isMember := false
	for _, m := range v.Members {
		if m.Token == me {
			if m.Pins != nil {
				pins = m.Pins
			} else {
				isMember = true
			}
		}
	}
	moving := 0
	for _, s := range v.Slots {
		if s.Owner == me && s.To != "" && s.To != me {
			moving++
		}
	}
	if !isMember {
		// A pinned worker: its pins that are free or reserved for it.
		want := map[int]bool{}
		for _, s := range pins {
			want[s] = true
		}
		for _, s := range v.Slots {
			if !want[s.Slot] {
				continue
			}
			p.Share++
			if s.Owner != me && (s.assigned() == "" || s.To == me) && !s.Other {
				p.Take = append(p.Take, s.Slot)
			}
		}
		return p
	}
	self := slices.Index(st.members, me)
	p.Share = st.target[self]

	// Reserved for me and released: claim.
	for _, s := range v.Slots {
		if s.To == me && s.Owner == "" && !s.Other {
			p.Take = append(p.Take, s.Slot)
		}
	}
	// Slots I hold that a live pinned worker wants: hand them over.
	var mine []int
	for _, s := range v.Slots {
		if s.Owner != me || (s.To != "" && s.To != me) {
			continue
		}
		if pw, ok := st.pinnedBy[s.Slot]; ok && pw != me {
			if moving < maxMoving {
				p.Give = append(p.Give, Move{Slot: s.Slot, To: pw})
				moving++
			}
			continue
		}
		mine = append(mine, s.Slot)
	}

	// The deficits, one unit per slot a member lacks, in token order: the
	// free slots fill the first units, the members above their share fill
	// the rest, in token order too. Every member computes the same
	// matching, so no two reach for the same slot.
	var units []int // member index per unit
	for i := range st.members {
		for range max(0, st.target[i]-st.count[i]) {
			units = append(units, i)
		}
	}
	u := 0
	for _, s := range st.free {
		if u == len(units) {
			break
		}
		if units[u] == self {
			p.Take = append(p.Take, s)
		}
		u++
	}
	sort.Sort(sort.Reverse(sort.IntSlice(mine))) // give the highest slots first
	for i := range st.members {
		excess := st.count[i] - st.target[i]
		for ; excess > 0 && u < len(units); excess-- {
			if i == self && moving < maxMoving && len(mine) > 0 {
				p.Give = append(p.Give, Move{Slot: mine[0], To: st.members[units[u]]})
				mine = mine[1:]
				moving++
			}
			u++
		}
	}
	sort.Ints(p.Take)
	return p
}
