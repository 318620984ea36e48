package parse

// anthropic reads the top-level members of an Anthropic Messages body.
// Sections (see the package documentation) are rendered at the end of
// out.prompt as their keys come and put in order by Parsed.order.
type anthropic struct{ *chat }

// field reads the top-level member k.
func (a anthropic) field(k []byte, out *Parsed, f *fields) (err error) {
	start := len(out.prompt)
	sec := -1
	switch string(k) {
	case "system":
		sec = secSystem
		out.prompt, err = a.system(out.prompt, 1)
	case "tools":
		sec = secTools
		out.prompt, err = a.tools(out.prompt, 1)
	case "messages":
		sec = secConv
		a.startRoot()
		out.prompt, err = a.messages(out.prompt, 1, false)
		out.rootLen = a.rootLen(start)
	case "metadata":
		f.ids[0], err = a.member(1, "user_id", false)
	default:
		err = a.s.Value(1)
	}
	if sec >= 0 {
		out.secs[sec] = span{start: start, end: len(out.prompt), set: true}
	}
	return err
}
