package parse

// responses reads the top-level members of an OpenAI Responses body.
type responses struct{ *chat }

// field reads the top-level member k. A section (see the package
// documentation) is rendered at the end of out.prompt and named by sec
// (-1: none); Parsed.order puts the sections in order.
func (r responses) field(k []byte, out *Parsed, f *fields) (sec int, err error) {
	switch string(k) {
	case "instructions":
		if r.s.Peek() == '[' {
			out.prompt, err = r.messages(out.prompt, 1, true)
		} else {
			out.prompt, err = r.system(out.prompt, 1)
		}
		return secSystem, err
	case "tools":
		out.prompt, err = r.tools(out.prompt, 1)
		return secTools, err
	case "input":
		start := len(out.prompt)
		r.startRoot()
		out.prompt, err = r.input(out.prompt, 1)
		out.rootLen = r.rootLen(start)
		return secConv, err
	case "conversation":
		f.ids[0], err = r.member(1, "id", true)
	case "previous_response_id":
		f.prev.raw, f.prev.esc, f.prev.ok, err = r.optString(1)
	case "user":
		f.ids[1].raw, f.ids[1].esc, f.ids[1].ok, err = r.optString(1)
	default:
		err = r.s.Value(1)
	}
	return -1, err
}

// input renders a Responses input: a string (one user message), an array
// of items, or null (nothing).
func (r responses) input(dst []byte, depth int) ([]byte, error) {
	if r.s.Peek() != '"' {
		return r.messages(dst, depth, true)
	}
	dst = append(dst, "<|user|>\n"...)
	dst, err := r.s.StrAppend(dst)
	if err != nil {
		return dst, err
	}
	dst = append(dst, '\n')
	if r.track && r.root == 0 {
		r.root = len(dst)
	}
	return dst, nil
}
