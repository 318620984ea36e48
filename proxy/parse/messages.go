package parse

// anthropic reads the top-level members of an Anthropic Messages body.
type anthropic struct{ *chat }

// field reads the top-level member k, as responses.field does.
func (a anthropic) field(k []byte, out *Parsed, f *fields) (sec int, err error) {
	switch string(k) {
	case "system":
		out.prompt, err = a.system(out.prompt, 1)
		return secSystem, err
	case "tools":
		out.prompt, err = a.tools(out.prompt, 1)
		return secTools, err
	case "messages":
		start := len(out.prompt)
		a.startRoot()
		out.prompt, err = a.messages(out.prompt, 1, false)
		out.rootLen = a.rootLen(start)
		return secConv, err
	case "metadata":
		f.ids[0], err = a.member(1, "user_id", false)
	default:
		err = a.s.Value(1)
	}
	return -1, err
}
