package infer

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sdtool/sdtool/family"
	"github.com/sdtool/sdtool/native"
	"github.com/sdtool/sdtool/pipeline"
	"github.com/sdtool/sdtool/tensor"
)

// Weights within a memory budget. The weights are cut into groups: a block
// (every weight whose name runs up to the same first numeric component,
// "….double_blocks.3", "….encoder.block.17", "….input_blocks.4") or a
// part's remaining weights (its embeddings, norms and heads). A group is
// either resident, in a buffer of its own kept across graphs, or streamed:
// read from its file into one of two slots just before the graph's nodes
// that read it run, the next group's read overlapping the current one's
// compute. Families need no code for it: the groups come from the names,
// and the nodes that read each group from the graph's operands, so a graph
// is cut where its streamed groups change (graph order follows the blocks,
// as every network is built block after block).
//
// With no budget every group is loaded at Load and the graphs run whole,
// as before. With one, nothing is loaded at Load; each graph makes its
// groups resident when they fit in the budget beside its compute buffer,
// and then keeps them across graphs, so that a model that fits runs as
// fast as without a budget. When they do not fit, it evicts the groups of
// other graphs (text encoders before the network runs, the network before
// the VAE), keeps resident what fits beside the compute buffer and the two
// slots, and streams the rest.

// streamAlign is the alignment of a weight in a group's layout (ggml's CPU
// buffers want 32; 64 suits cache lines).
const streamAlign = 64

// weightGroup is one block's (or one part's other) weights.
type weightGroup struct {
	Name string
	// block is false for a part's weights outside its numbered blocks,
	// read at the start and end of a graph; they are made resident first.
	block   bool
	members []int   // indexes into pager.specs
	offs    []int64 // each member's offset in the group's layout
	Size    int64
	Buf     *native.Buffer // resident copy, nil when not resident
	inRing  bool           // its tensors point into the slots
}

// fileStamp is what a component file looked like when loaded; a streamed
// read checks it, so that a file replaced or truncated meanwhile is an
// error naming the tensor rather than garbage or a crash.
type fileStamp struct {
	size int64
	mod  time.Time
}

// MemoryStats says how a model's weights were held.
type MemoryStats struct {
	// Budget is the memory budget (0: none): the last one read, where
	// LoadOptions.Rebudget reads it again.
	Budget int64
	// Weights is the size of all weights as held in ggml.
	Weights int64
	// Resident is the most weight bytes resident at once.
	Resident int64
	// Streamed counts the weight bytes read from the files while graphs
	// ran, StreamedGroups the distinct groups (blocks) read so.
	Streamed       int64
	StreamedGroups int
	// Reread counts the blocks read more than once within one graph (a
	// graph whose nodes do not follow its blocks); 0 for every family. (A
	// part's other weights, read at a graph's start and end, are read
	// twice when the budget cannot keep them.)
	Reread int
	// Slots is the size of the two streaming slots (0 when nothing streamed).
	Slots int64
	// Waited is how long computing waited for streamed reads (the part
	// of the reading the overlap did not hide).
	Waited time.Duration
	// Compute is the largest compute buffer.
	Compute int64
	// Held is the most bytes held outside the budget at once: the
	// caller's (LoadOptions.Held) and the block outputs a render captured.
	Held int64
}

// pager holds a model's weights within the budget.
type pager struct {
	be      *native.Backend
	budget  int64
	specs   []WeightSpec
	tensors []native.Tensor
	Groups  []*weightGroup
	group   map[native.Tensor]int
	stamps  map[string]fileStamp
	scratch tensor.Scratch

	ring    *native.Buffer // two slots of slot bytes each
	slot    int64
	SlotHas [2]int // the group each slot holds, -1: none
	Largest int    // the largest group

	// Uses and needed are the graph's reads of groups and the groups it
	// reads, in node order (prepare finds them, run uses them).
	Uses   []use
	needed []int
	// prepared is the graph prepare last saw: run refuses another, whose
	// weights the allocator would have placed in the compute buffer.
	prepared *native.Graph

	stats    MemoryStats
	Resident int64
	streamed map[int]bool
	// held is what the process holds outside the budget (baseHeld, the
	// caller's, and the current render's captured block outputs): the
	// groups, slots and compute buffer get the budget less it.
	held, baseHeld int64
	// rebudget, when not nil, gives the budget again before a graph
	// reads weights it lacks (LoadOptions.Rebudget), ceiling at most.
	rebudget func(holding int64) int64
	ceiling  int64
}

// room is the budget left to the weights and the compute buffer.
func (p *pager) room() int64 { return p.budget - p.held }

// hold counts n more bytes held outside the budget until the render ends.
func (p *pager) hold(n int64) {
	if p == nil {
		return
	}
	p.held += n
	p.stats.Held = max(p.stats.Held, p.held)
}

// shed releases every resident weight when what is held outside the
// budget grew (a render's captured block outputs) past the room they had
// beside the compute buffer and the slots; the next graph then keeps
// resident what fits in what is left, and streams the rest.
func (p *pager) shed(compute int64) error {
	if p == nil || p.budget <= 0 || p.Resident+compute+2*p.slot <= p.room() {
		return nil
	}
	return p.release()
}

// resetHeld drops the last render's bytes at the start of the next.
func (p *pager) resetHeld() {
	if p != nil {
		p.held = p.baseHeld
		p.stats.Held = max(p.stats.Held, p.held)
	}
}

// BudgetError is returned when the memory budget cannot hold what
// streaming needs: two slots of the largest block and the compute buffer.
type BudgetError struct {
	// Budget is the budget given.
	Budget int64
	// Block names the largest group and Bytes its size.
	Block string
	Bytes int64
	// Compute is the graph's compute buffer (0 at load, before any graph).
	Compute int64
	// Held is what the process held outside the budget (renders kept).
	Held int64
}

// Error says what the budget must be at least.
func (e *BudgetError) Error() string {
	need := 2*e.Bytes + e.Compute + e.Held
	what := fmt.Sprintf("block %q holds %s and streaming keeps two such blocks", e.Block, pipeline.HumanBytes(e.Bytes))
	if e.Compute > 0 {
		what += fmt.Sprintf(" beside a compute buffer of %s", pipeline.HumanBytes(e.Compute))
	}
	if e.Held > 0 {
		what += fmt.Sprintf(" and %s of renders kept", pipeline.HumanBytes(e.Held))
	}
	return fmt.Sprintf("memory budget %s is too small: %s, %s at least", pipeline.HumanBytes(e.Budget), what, pipeline.HumanBytes(need))
}

// groupName returns the group a weight belongs to: its name up to the
// first numeric component after the prefix of the part holding it (so
// that "cond_stage_model.1." names a part, not a block), else that prefix.
func groupName(name string) (string, bool) {
	part := ""
	for _, in := range family.GenerateInputs() {
		for _, p := range in.Parts {
			if HasPrefix(name, p) && len(p) > len(part) {
				part = p
			}
		}
	}
	parts := strings.Split(name[len(part):], ".")
	for i, p := range parts[:len(parts)-1] {
		if p != "" && strings.Trim(p, "0123456789") == "" {
			return part + strings.Join(parts[:i+1], "."), true
		}
	}
	return strings.TrimSuffix(part, "."), false
}

// newPager groups the weights (tensors[i] holds specs[i]) and stamps their files.
func newPager(be *native.Backend, specs []WeightSpec, tensors []native.Tensor, budget int64) (*pager, error) {
	if err := native.CheckStreamLayout(); err != nil {
		return nil, err
	}
	p := &pager{be: be, budget: budget, specs: specs, tensors: tensors, group: map[native.Tensor]int{},
		stamps: map[string]fileStamp{}, SlotHas: [2]int{-1, -1}, streamed: map[int]bool{}}
	byName := map[string]int{}
	for i := range specs {
		name, block := groupName(specs[i].Name)
		gi, ok := byName[name]
		if !ok {
			gi = len(p.Groups)
			byName[name] = gi
			p.Groups = append(p.Groups, &weightGroup{Name: name, block: block})
		}
		g := p.Groups[gi]
		g.members = append(g.members, i)
		g.offs = append(g.offs, g.Size)
		g.Size += (tensors[i].Bytes() + streamAlign - 1) / streamAlign * streamAlign
		p.group[tensors[i]] = gi
		if err := p.stamp(specs[i].Src.Tensor.File); err != nil {
			return nil, err
		}
	}
	for gi, g := range p.Groups {
		p.stats.Weights += g.Size
		if g.Size > p.Groups[p.Largest].Size {
			p.Largest = gi
		}
	}
	p.stats.Budget = budget
	return p, nil
}

func (p *pager) stamp(path string) error {
	if _, ok := p.stamps[path]; ok || path == "" {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	p.stamps[path] = fileStamp{fi.Size(), fi.ModTime()}
	return nil
}

// start loads every group when there is no budget; with one, a graph
// loads what it needs (and keeps it while it fits beside its compute
// buffer, which is known only then).
func (p *pager) start() error {
	if p.budget <= 0 {
		for gi := range p.Groups {
			if err := p.load(gi); err != nil {
				return err
			}
		}
		return nil
	}
	if big := p.Groups[p.Largest]; p.stats.Weights > p.budget && 2*big.Size > p.budget {
		return &BudgetError{Budget: p.budget, Block: big.Name, Bytes: big.Size}
	}
	return nil
}

// free releases every buffer.
func (p *pager) free() {
	for _, g := range p.Groups {
		g.Buf.Free()
		g.Buf = nil
	}
	p.ring.Free()
	p.ring = nil
}

// unbind leaves a group's tensors without data.
func (p *pager) unbind(gi int) {
	g := p.Groups[gi]
	for _, i := range g.members {
		p.tensors[i].Unbind()
	}
	g.inRing = false
}

// sizeRing makes the slots slot bytes each; the groups placed in the old
// ones are unbound.
func (p *pager) sizeRing(slot int64) error {
	if p.ring != nil && p.slot == slot {
		return nil
	}
	for gi, g := range p.Groups {
		if g.inRing {
			p.unbind(gi)
		}
	}
	p.ring.Free()
	p.ring, p.slot, p.SlotHas = nil, 0, [2]int{-1, -1}
	ring, err := p.be.AllocBuffer(2 * slot)
	if err != nil {
		return err
	}
	p.ring, p.slot = ring, slot
	return nil
}

// place points a group's tensors at a slot.
func (p *pager) place(gi, slot int) error {
	g := p.Groups[gi]
	for k, i := range g.members {
		if err := p.tensors[i].Bind(p.ring, int64(slot)*p.slot+g.offs[k]); err != nil {
			return fmt.Errorf("%s: tensor %q: %w", p.specs[i].Src.Tensor.File, p.specs[i].Src.Name, err)
		}
	}
	g.inRing = true
	return nil
}

// load makes a group resident.
func (p *pager) load(gi int) error {
	g := p.Groups[gi]
	buf, err := p.be.AllocBuffer(g.Size)
	if err != nil {
		return fmt.Errorf("block %q: %w", g.Name, err)
	}
	if err := p.read(gi, buf.Host(), &p.scratch); err != nil {
		buf.Free()
		return err
	}
	for k, i := range g.members {
		if err := p.tensors[i].Bind(buf, g.offs[k]); err != nil {
			buf.Free()
			return err
		}
	}
	g.Buf, g.inRing = buf, false
	p.Resident += g.Size
	p.stats.Resident = max(p.stats.Resident, p.Resident)
	return nil
}

// evict drops a resident group's copy, leaving its tensors without data
// until a graph places them again.
func (p *pager) evict(gi int) {
	g := p.Groups[gi]
	if g.Buf == nil {
		return
	}
	p.unbind(gi)
	g.Buf.Free()
	g.Buf = nil
	p.Resident -= g.Size
}

// release evicts every group and frees the slots (another model is about to run).
func (p *pager) release() error {
	for gi := range p.Groups {
		p.evict(gi)
		p.unbind(gi)
	}
	p.ring.Free()
	p.ring, p.slot, p.SlotHas = nil, 0, [2]int{-1, -1}
	return nil
}

// read reads a group's weights, in their held types, into dst (laid out
// as the group is), checking first that their files are as loaded.
func (p *pager) read(gi int, dst []byte, scratch *tensor.Scratch) error {
	g := p.Groups[gi]
	for k, i := range g.members {
		s := &p.specs[i]
		if k == 0 || s.Src.Tensor.File != p.specs[g.members[k-1]].Src.Tensor.File {
			if err := p.unchanged(s); err != nil {
				return err
			}
		}
		if err := s.readInto(dst[g.offs[k]:g.offs[k]+p.tensors[i].Bytes()], scratch); err != nil {
			return err
		}
	}
	return nil
}

// unchanged checks a weight's file has the size and time it had at load.
func (p *pager) unchanged(s *WeightSpec) error {
	path := s.Src.Tensor.File
	want, ok := p.stamps[path]
	if !ok {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: tensor %q: %w", path, s.Src.Name, err)
	}
	if fi.Size() != want.size || !fi.ModTime().Equal(want.mod) {
		return fmt.Errorf("%s: tensor %q: the file changed after the model was loaded (%d bytes then, %d now); load it again", path, s.Src.Name, want.size, fi.Size())
	}
	return nil
}

// use is one node reading a group.
type use struct{ node, Group int }

// segment is a range of a graph's nodes and the streamed group they read (-1: none).
type segment struct{ i0, i1, group int }

// prepare readies a built graph for allocation: with a budget and reorder
// set it orders the nodes block after block, and it gives every weight the graph reads
// a place (the slots, for the groups not resident, sized for the largest
// group the graph reads), since the allocator would otherwise place them.
func (p *pager) prepare(gr *native.Graph, reorder bool) error {
	p.prepared = gr
	if p.budget > 0 && reorder {
		p.walk(gr)
		if p.mayStream() {
			if err := p.reorder(gr); err != nil {
				return err
			}
		}
	}
	p.walk(gr)
	var largest int64
	missing := false
	for _, gi := range p.needed {
		g := p.Groups[gi]
		largest = max(largest, g.Size)
		missing = missing || g.Buf == nil
	}
	if !missing {
		return nil
	}
	if err := p.sizeRing(largest); err != nil {
		return err
	}
	for _, gi := range p.needed {
		if p.Groups[gi].Buf == nil {
			if err := p.place(gi, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// mayStream reports whether graphs may stream weights, so that ordering
// them block after block pays: the model's weights take more than a
// quarter of the budget. Below that everything stays resident beside any
// compute buffer but a huge one (which then streams in ggml's order,
// correctly if less tidily), and the ordering's cost is not paid on every
// graph of a model that fits.
func (p *pager) mayStream() bool { return 4*p.stats.Weights > p.budget }

// walk finds the groups each node of the graph reads.
func (p *pager) walk(gr *native.Graph) {
	p.Uses, p.needed = p.Uses[:0], p.needed[:0]
	seen := map[int]bool{}
	gr.Operands(func(node int, op native.Tensor) {
		if gi, ok := p.group[op]; ok {
			p.Uses = append(p.Uses, use{node, gi})
			if !seen[gi] {
				seen[gi] = true
				p.needed = append(p.needed, gi)
			}
		}
	})
}

// run computes an allocated graph whose compute buffer is compute bytes:
// whole when its groups are resident, else in segments with the streamed
// groups read into the slots.
func (p *pager) run(gr *native.Graph, compute int64) error {
	if gr != p.prepared {
		return errors.New("infer: a graph computed without weightSet.prepare before its allocation")
	}
	p.prepared = nil
	p.stats.Compute = max(p.stats.Compute, compute)
	if err := p.settle(compute); err != nil {
		return err
	}
	segs, err := p.segments(gr.Nodes())
	if err != nil {
		return err
	}
	if len(segs) == 0 {
		gr.RefreshViews()
		return p.be.Compute(gr)
	}
	return p.stream(gr, segs)
}

// settle makes the groups the graph needs resident when they all fit;
// otherwise it evicts the groups of other graphs and keeps resident, within
// the budget less the compute buffer and the slots, the parts' weights
// outside blocks (embeddings and heads, read at both ends of a graph),
// then the smallest blocks, and streams the rest.
func (p *pager) settle(compute int64) error {
	var missing, total int64
	for _, gi := range p.needed {
		total += p.Groups[gi].Size
		if p.Groups[gi].Buf == nil {
			missing += p.Groups[gi].Size
		}
	}
	if missing == 0 {
		return nil
	}
	p.readBudget(compute)
	if p.budget <= 0 || p.Resident+missing+compute <= p.room() || total+compute <= p.room() {
		return p.keepOnly(p.needed, compute)
	}
	room := p.room() - compute - 2*p.slot
	if room < 0 {
		big := p.needed[0]
		for _, gi := range p.needed {
			if p.Groups[gi].Size > p.Groups[big].Size {
				big = gi
			}
		}
		return &BudgetError{Budget: p.budget, Block: p.Groups[big].Name, Bytes: p.slot, Compute: compute, Held: p.held}
	}
	order := slices.Clone(p.needed)
	slices.SortStableFunc(order, func(a, b int) int {
		ga, gb := p.Groups[a], p.Groups[b]
		if ga.block != gb.block {
			if ga.block {
				return 1
			}
			return -1
		}
		return int(ga.Size - gb.Size)
	})
	var keep []int
	for _, gi := range order {
		if g := p.Groups[gi]; g.Size <= room {
			keep = append(keep, gi)
			room -= g.Size
		}
	}
	return p.keepOnly(keep, compute)
}

// readBudget asks rebudget for the budget now, keeping it within the
// ceiling and above what streaming this graph needs (its two slots, the
// compute buffer and what is held outside the budget).
func (p *pager) readBudget(compute int64) {
	if p.rebudget == nil || p.ceiling <= 0 {
		return
	}
	floor := 2*p.slot + compute + p.held
	p.budget = min(p.ceiling, max(p.rebudget(p.Resident+2*p.slot+compute), floor))
	p.stats.Budget = p.budget
}

// keepOnly makes the groups keep resident; when they would not fit beside
// the other resident groups, or the graph streams some, it first evicts
// every group not kept.
func (p *pager) keepOnly(keep []int, compute int64) error {
	var missing int64
	for _, gi := range keep {
		if p.Groups[gi].Buf == nil {
			missing += p.Groups[gi].Size
		}
	}
	if p.budget > 0 && p.Resident+missing+compute > p.room() || len(keep) < len(p.needed) {
		for gi := range p.Groups {
			if !slices.Contains(keep, gi) {
				p.evict(gi)
			}
		}
	}
	for _, gi := range keep {
		if p.Groups[gi].Buf == nil {
			if err := p.load(gi); err != nil {
				return err
			}
		}
	}
	return nil
}

// segments cuts nodes [0, n) where the streamed group they read changes;
// none when no group streams.
func (p *pager) segments(n int) ([]segment, error) {
	var out []segment
	cur := segment{0, n, -1}
	last := -1
	for _, u := range p.Uses {
		if p.Groups[u.Group].Buf != nil {
			continue
		}
		switch {
		case cur.group == -1:
			cur.group = u.Group
		case u.Group != cur.group:
			if u.node == last {
				return nil, fmt.Errorf("blocks %q and %q are read by one operation: they cannot be streamed one after the other",
					p.Groups[cur.group].Name, p.Groups[u.Group].Name)
			}
			cur.i1 = u.node
			out = append(out, cur)
			cur = segment{u.node, n, u.Group}
		}
		last = u.node
	}
	if cur.group == -1 {
		return nil, nil
	}
	return append(out, cur), nil
}

// stream runs the segments in order, segment k after its group was read
// into slot (k+start)%2, a reader goroutine filling the other slot
// meanwhile. While the last segment runs, the reader reads the first
// segment's group again into the free slot, where the next graph of the
// same network (the next step, or the negative pass) finds it: start is
// that slot when it holds the first group.
func (p *pager) stream(gr *native.Graph, segs []segment) error {
	p.stats.Slots = max(p.stats.Slots, 2*p.slot)
	start := 0
	if p.SlotHas[1] == segs[0].group {
		start = 1
	}
	done := make([]chan error, len(segs))
	for k := range done {
		done[k] = make(chan error, 1)
	}
	free := [2]chan struct{}{make(chan struct{}, 1), make(chan struct{}, 1)}
	free[0] <- struct{}{}
	free[1] <- struct{}{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	var read int64
	go func() {
		defer wg.Done()
		scratch := &tensor.Scratch{}
		fill := func(slot, group int) error {
			if p.SlotHas[slot] == group {
				return nil
			}
			p.SlotHas[slot] = -1
			host := p.ring.Host()[int64(slot)*p.slot : int64(slot+1)*p.slot]
			if err := p.read(group, host, scratch); err != nil {
				return err
			}
			p.SlotHas[slot] = group
			read += p.Groups[group].Size
			return nil
		}
		for k, s := range segs {
			select {
			case <-free[(k+start)%2]:
			case <-stop:
				return
			}
			err := fill((k+start)%2, s.group)
			done[k] <- err
			if err != nil {
				return
			}
		}
		if len(segs) > 1 {
			select {
			case <-free[(len(segs)+start)%2]:
				fill((len(segs)+start)%2, segs[0].group) // an error is the next graph's to report
			case <-stop:
			}
		}
	}()
	err := p.computeSegments(gr, segs, start, done, free)
	close(stop)
	wg.Wait()
	p.stats.Streamed += read
	inGraph := map[int]bool{}
	for _, s := range segs {
		if inGraph[s.group] && p.Groups[s.group].block {
			p.stats.Reread++
		}
		inGraph[s.group] = true
		p.streamed[s.group] = true
	}
	p.stats.StreamedGroups = len(p.streamed)
	return err
}

// computeSegments waits for each segment's group, points its tensors at
// the slot and runs the segment's nodes.
func (p *pager) computeSegments(gr *native.Graph, segs []segment, start int, done []chan error, free [2]chan struct{}) error {
	for k, s := range segs {
		t0 := time.Now()
		err := <-done[k]
		p.stats.Waited += time.Since(t0)
		if err != nil {
			return err
		}
		slot := (k + start) % 2
		if err := p.place(s.group, slot); err != nil {
			return err
		}
		gr.RefreshViews()
		err = p.be.ComputeRange(gr, s.i0, s.i1)
		free[slot] <- struct{}{}
		if err != nil {
			if errors.Is(err, native.ErrAborted) {
				return err
			}
			return fmt.Errorf("block %q: %w", p.Groups[s.group].Name, err)
		}
	}
	return nil
}
