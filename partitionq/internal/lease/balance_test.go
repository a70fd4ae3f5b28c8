package lease

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// cluster simulates the members of a group stepping on one shared picture:
// each step every member plans on the same View, reserves what it gives,
// releases it (a handoff that drains at once) and claims what it takes.
type cluster struct {
	slots   []SlotView
	members []Member
}

func newCluster(n int) *cluster {
	c := &cluster{}
	for s := range n {
		c.slots = append(c.slots, SlotView{Slot: s})
	}
	return c
}

func (c *cluster) view() View {
	return View{Slots: slices.Clone(c.slots), Members: slices.Clone(c.members)}
}

func (c *cluster) live(tok string) bool {
	for _, m := range c.members {
		if m.Token == tok {
			return true
		}
	}
	return false
}

// step runs one round; it reports whether anything changed.
func (c *cluster) step(t *testing.T, maxMoving int) bool {
	t.Helper()
	v := c.view()
	changed := false
	for _, m := range c.members {
		p := PlanFor(v, m.Token, maxMoving)
		for _, g := range p.Give {
			s := &c.slots[g.Slot]
			if s.Owner != m.Token || (s.To != "" && s.To != m.Token) {
				t.Fatalf("%s gives slot %d it does not hold: %+v", m.Token, g.Slot, *s)
			}
			s.To, s.Owner = g.To, "" // reserved, drained and released at once
			changed = true
		}
		for _, n := range p.Take {
			s := &c.slots[n]
			if s.Owner != "" && c.live(s.Owner) && s.Owner != m.Token {
				t.Fatalf("%s takes slot %d of live %s", m.Token, n, s.Owner)
			}
			if s.To != "" && s.To != m.Token && c.live(s.To) {
				t.Fatalf("%s takes slot %d reserved for %s", m.Token, n, s.To)
			}
		}
	}
	// The claims, after every plan was made (the same picture for all).
	after := c.view()
	for _, m := range c.members {
		for _, n := range PlanFor(after, m.Token, maxMoving).Take {
			s := &c.slots[n]
			if s.Owner == "" && (s.To == "" || s.To == m.Token) { // as the claim's statement judges
				s.Owner, s.To = m.Token, ""
				changed = true
			}
		}
	}
	return changed
}

func (c *cluster) join(tok string) { c.members = append(c.members, Member{Token: tok}) }

func (c *cluster) leave(tok string) {
	c.members = slices.DeleteFunc(c.members, func(m Member) bool { return m.Token == tok })
	for i := range c.slots {
		if c.slots[i].Owner == tok {
			c.slots[i].Owner = ""
		}
		if c.slots[i].To == tok {
			c.slots[i].To = ""
		}
	}
}

func (c *cluster) settle(t *testing.T, maxMoving int) int {
	t.Helper()
	for round := 0; ; round++ {
		if round > 200 {
			t.Fatalf("no steady state after 200 rounds: %+v", c.slots)
		}
		if !c.step(t, maxMoving) {
			return round
		}
	}
}

func (c *cluster) counts() map[string]int {
	out := map[string]int{}
	for _, s := range c.slots {
		if s.Owner != "" {
			out[s.Owner]++
		}
	}
	return out
}

// checkShares checks that every slot is owned and every member holds floor
// or ceil of N/P.
func (c *cluster) checkShares(t *testing.T) {
	t.Helper()
	n, p := len(c.slots), len(c.members)
	if p == 0 {
		return
	}
	cs := c.counts()
	total := 0
	for _, m := range c.members {
		k := cs[m.Token]
		total += k
		if k < n/p || k > (n+p-1)/p {
			t.Fatalf("%s holds %d of %d slots with %d members: %v", m.Token, k, n, p, cs)
		}
	}
	if total != n {
		t.Fatalf("%d of %d slots owned: %+v", total, n, c.slots)
	}
}

func TestSharesSettleAndSteadyMembershipMovesNothing(t *testing.T) {
	for _, n := range []int{1, 3, 8, 16, 17, 64, 256} {
		for _, p := range []int{1, 2, 3, 4, 5, 7} {
			t.Run(fmt.Sprintf("N=%d P=%d", n, p), func(t *testing.T) {
				c := newCluster(n)
				for i := range p {
					c.join(fmt.Sprintf("m%02d", i))
					c.settle(t, 4)
				}
				c.checkShares(t)
				before := slices.Clone(c.slots)
				if c.step(t, 4) {
					t.Fatalf("a steady membership moved slots")
				}
				if !slices.Equal(before, c.slots) {
					t.Fatalf("slots changed without a membership change")
				}
			})
		}
	}
}

// A join moves only what the new shares need, all from members above
// their new share (sticky); a leave frees only the leaver's slots, which
// the others take without moving their own.
func TestJoinAndLeaveMoveOnlyWhatTheSharesNeed(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := 1 + rng.IntN(64)
		c := newCluster(n)
		p := 1 + rng.IntN(6)
		next := 0
		for range p {
			c.join(fmt.Sprintf("m%02d", next))
			next++
		}
		c.settle(t, 1+rng.IntN(8))
		c.checkShares(t)
		for op := range 6 {
			before := c.counts()
			ownerBefore := map[int]string{}
			for _, s := range c.slots {
				ownerBefore[s.Slot] = s.Owner
			}
			var leaver string
			if len(c.members) > 1 && rng.IntN(2) == 0 {
				leaver = c.members[rng.IntN(len(c.members))].Token
				c.leave(leaver)
			} else {
				c.join(fmt.Sprintf("m%02d", next))
				next++
			}
			c.settle(t, 1+rng.IntN(8))
			c.checkShares(t)
			after := c.counts()
			moved := 0
			lost, gained := map[string]bool{}, map[string]bool{}
			for _, s := range c.slots {
				if o := ownerBefore[s.Slot]; o != s.Owner {
					gained[s.Owner] = true
					lost[o] = true
				}
				if o := ownerBefore[s.Slot]; o != "" && o != leaver && o != s.Owner {
					moved++
					if after[o] < len(c.slots)/len(c.members) {
						t.Fatalf("trial %d op %d: slot %d moved from %s, which then holds %d, below its share", trial, op, s.Slot, o, after[o])
					}
				}
			}
			least := 0 // the fewest moves any plan needs: what members above their new ceil hold beyond it
			hi := (n + len(c.members) - 1) / len(c.members)
			for m, k := range before {
				if m != leaver && k > hi {
					least += k - hi
				}
			}
			for m := range gained {
				if lost[m] {
					t.Fatalf("trial %d op %d: %s both gave and took slots (%v -> %v)", trial, op, m, before, after)
				}
			}
			if leaver != "" && moved != 0 {
				t.Fatalf("trial %d op %d: a leave moved %d slots between the members that stayed (%v -> %v)", trial, op, moved, before, after)
			}
			// Beyond the members above the new ceil, a join may move one slot
			// per member whose ceil share becomes a floor one.
			if moved > least+len(c.members) {
				t.Fatalf("trial %d op %d: %d slots moved, the least is %d (%v -> %v)", trial, op, moved, least, before, after)
			}
		}
	}
}

// Pinned workers get their pins; the balancing ones share the rest and
// hand over a pinned slot they hold.
func TestPinnedWorkersTakeTheirSlotsAndTheOthersShareTheRest(t *testing.T) {
	c := newCluster(8)
	c.join("a")
	c.join("b")
	c.settle(t, 8)
	c.checkShares(t)
	c.members = append(c.members, Member{Token: "p", Pins: []int{0, 1, 7}})
	c.settle(t, 8)
	cs := c.counts()
	if cs["p"] != 3 || cs["a"]+cs["b"] != 5 || cs["a"] < 2 || cs["b"] < 2 {
		t.Fatalf("pinned p should hold its 3 slots and a, b share 5: %v %+v", cs, c.slots)
	}
	for _, s := range []int{0, 1, 7} {
		if c.slots[s].Owner != "p" {
			t.Fatalf("slot %d owned by %s, pinned to p", s, c.slots[s].Owner)
		}
	}
	// The pinned worker leaves: its slots are shared out.
	c.leave("p")
	c.settle(t, 8)
	c.checkShares(t)
}

func TestAPlanNeverHandsOverMoreThanItsLimitAtOnce(t *testing.T) {
	c := newCluster(32)
	c.join("a")
	c.settle(t, 4)
	c.join("b")
	v := c.view()
	p := PlanFor(v, "a", 3)
	if len(p.Give) != 3 {
		t.Fatalf("a gives %d slots, want the limit 3 (of 16 to move)", len(p.Give))
	}
	for _, g := range p.Give {
		c.slots[g.Slot].To = g.To // reserved, still draining
	}
	if p := PlanFor(c.view(), "a", 3); len(p.Give) != 0 {
		t.Fatalf("with 3 handoffs in flight a gives %d more", len(p.Give))
	}
	if p := PlanFor(c.view(), "b", 3); p.Share != 16 || len(p.Take) != 0 {
		t.Fatalf("b's plan while the handoffs drain: %+v", p)
	}
}

func TestSharesAreTheSameForEveryMember(t *testing.T) {
	v := View{Members: []Member{{Token: "c"}, {Token: "a"}, {Token: "b"}}}
	for s := range 10 {
		owner := []string{"a", "a", "a", "a", "a", "a", "b", "b", "", ""}[s]
		v.Slots = append(v.Slots, SlotView{Slot: s, Owner: owner})
	}
	sh := Shares(v)
	if sh["a"] != 4 || sh["b"] != 3 || sh["c"] != 3 {
		t.Fatalf("shares %v: a holds the most, so it keeps the one ceil share (4, 3, 3)", sh)
	}
	for _, m := range v.Members {
		if got := PlanFor(v, m.Token, 8).Share; got != sh[m.Token] {
			t.Fatalf("%s's plan says share %d, Shares %d", m.Token, got, sh[m.Token])
		}
	}
}
