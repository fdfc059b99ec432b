// Package clicheck checks the command lines written in help text and docs
// against the program's real cobra command tree, so an example cannot name
// a command, flag or argument the program does not take. It is for tests:
// it parses flags but runs nothing.
//
// A command line is found wherever the program's name starts a word of a
// shell-like line (after sudo, an environment assignment, "--" or inside a
// quoted sh -c string); it ends at |, &&, ||, ;, & or a redirection.
// Backslash-newline continues a line; # starts a comment.
package clicheck

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Invocation is one command line found in a text.
type Invocation struct {
	Line string   // the (joined) source line, for messages
	Args []string // the words after the program's name
}

// Find returns every invocation of prog in text, a shell snippet.
func Find(text, prog string) []Invocation {
	var out []Invocation
	text = strings.ReplaceAll(text, "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		out = append(out, findInWords(line, words(line), prog)...)
	}
	return out
}

// FindInMarkdown returns the invocations of prog in a markdown document's
// fenced code blocks and in its inline code spans that start with prog.
func FindInMarkdown(doc, prog string) []Invocation {
	var out []Invocation
	var block strings.Builder
	in := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			if in {
				out = append(out, Find(block.String(), prog)...)
				block.Reset()
			}
			in = !in
			continue
		}
		if in {
			block.WriteString(line + "\n")
			continue
		}
		for _, m := range inlineCode.FindAllStringSubmatch(line, -1) {
			if strings.HasPrefix(m[1], prog+" ") || strings.HasPrefix(m[1], "sudo "+prog+" ") {
				out = append(out, Find(m[1], prog)...)
			}
		}
	}
	return out
}

var inlineCode = regexp.MustCompile("`([^`]+)`")

func findInWords(line string, ws []string, prog string) []Invocation {
	var out []Invocation
	for i, w := range ws {
		if strings.ContainsAny(w, " \t") {
			// A quoted script (sh -c '...'): look inside it.
			out = append(out, findInWords(line, words(w), prog)...)
			continue
		}
		// prog, ./prog or a bin/ directory's prog; not a source path
		// (cmd/prog) in a diagram.
		if w != prog && w != "./"+prog && !strings.HasSuffix(w, "bin/"+prog) {
			continue
		}
		j := i + 1
		for j < len(ws) && !isEnd(ws[j]) {
			j++
		}
		out = append(out, Invocation{Line: strings.TrimSpace(line), Args: ws[i+1 : j]})
	}
	return out
}

func isEnd(w string) bool {
	switch w {
	case "|", "||", "&&", ";", "&":
		return true
	}
	if strings.HasPrefix(w, "<") && strings.HasSuffix(w, ">") {
		return false // a <placeholder>
	}
	return strings.HasPrefix(w, ">") || strings.HasPrefix(w, "2>") || strings.HasPrefix(w, "<")
}

// Indented returns the lines of help text indented by two spaces or more,
// where cobra's Long text shows commands; the rest is prose.
func Indented(text string) string {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "\t") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// words splits a line as a shell would, roughly: quotes group, backslash
// escapes, # at a word's start ends the line; operators are words.
func words(line string) []string {
	var out []string
	var cur strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			out = append(out, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			flush()
		case c == '#' && !inWord:
			flush()
			return out
		case c == '\'' || c == '"':
			end := strings.IndexByte(line[i+1:], c)
			if end < 0 {
				end = len(line) - i - 1
			}
			cur.WriteString(line[i+1 : i+1+end])
			inWord = true
			i += end + 1
		case c == '\\' && i+1 < len(line):
			cur.WriteByte(line[i+1])
			inWord = true
			i++
		case c == '|' || c == ';' || c == '&':
			flush()
			op := string(c)
			if i+1 < len(line) && line[i+1] == c {
				op += string(c)
				i++
			}
			out = append(out, op)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	flush()
	return out
}

// Check parses args as newRoot's program would (a fresh tree each time:
// cobra keeps parsed flag values) and reports a command, flag, flag value
// or positional argument it would refuse before running.
func Check(newRoot func() *cobra.Command, args []string) error {
	root := newRoot()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	root.InitDefaultVersionFlag()
	for c := cmd; c != nil; c = c.Parent() {
		c.InitDefaultHelpFlag()
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	if help, _ := cmd.Flags().GetBool("help"); help {
		return nil
	}
	pos := cmd.Flags().Args()
	if !cmd.Runnable() && cmd.HasSubCommands() && len(pos) > 0 {
		return fmt.Errorf("%s: unknown command %q", cmd.CommandPath(), pos[0])
	}
	if err := cmd.ValidateArgs(pos); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	return nil
}

// Commands returns every command of the tree under root, root included.
func Commands(root *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{root}
	for _, c := range root.Commands() {
		out = append(out, Commands(c)...)
	}
	return out
}

// MaxFlagHelp is the most a flag's help in --help may be, in characters:
// one short line saying what the flag does. Detail (figures, trade-offs,
// how it works with other flags) goes in the docs.
const MaxFlagHelp = 99

// LongFlagHelp describes each flag of root and its subcommands whose help
// is longer than MaxFlagHelp; flags is how many flags it read.
func LongFlagHelp(root *cobra.Command) (long []string, flags int) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			flags++
			if l := utf8.RuneCountInString(f.Usage); l > MaxFlagHelp {
				long = append(long, fmt.Sprintf("%s --%s: help is %d characters, want at most %d: %q", c.CommandPath(), f.Name, l, MaxFlagHelp, f.Usage))
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return long, flags
}
