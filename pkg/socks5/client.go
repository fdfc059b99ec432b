package socks5

import (
	"context"
	"fmt"
	"net"

	"github.com/relaymesh/relaymesh/pkg/chain"
)

// Client asks a SOCKS5 server to CONNECT somewhere over an existing conn. It
// reads exactly the bytes of each reply (no buffering), so after a successful
// Through the conn is the raw tunnel and stays a *net.TCPConn if it was one.
type Client struct {
	User     string // empty: offer only "no authentication"
	Password string
}

// Through implements chain.HopDialer. Failure replies become errors that
// chain.Classify maps back to the same kind (0x02 → denied, 0x05 → refused...).
func (c Client) Through(ctx context.Context, conn net.Conn, addr string) error {
	target, err := ParseAddr(addr)
	if err != nil {
		return fmt.Errorf("socks5: target %q: %w", addr, err)
	}
	method := MethodNoAuth
	if c.User != "" || c.Password != "" {
		method = MethodUserPass
	}
	if _, err := conn.Write(MarshalGreeting(method)); err != nil {
		return fmt.Errorf("socks5: send greeting: %w", err)
	}
	chosen, err := ReadMethodChoice(conn)
	if err != nil {
		return fmt.Errorf("socks5: read method choice: %w", err)
	}
	switch chosen {
	case method:
	case MethodNoAcceptable:
		if method == MethodNoAuth {
			return &chain.HopAuthError{Msg: "socks5: server requires authentication; put user:password in the hop URL"}
		}
		return &chain.HopAuthError{Msg: "socks5: server does not accept username/password"}
	default:
		return fmt.Errorf("socks5: server chose method 0x%02x we did not offer", byte(chosen))
	}
	if method == MethodUserPass {
		msg, err := MarshalUserPass(c.User, c.Password)
		if err != nil {
			return err
		}
		if _, err := conn.Write(msg); err != nil {
			return fmt.Errorf("socks5: send credentials: %w", err)
		}
		ok, err := ReadAuthStatus(conn)
		if err != nil {
			return fmt.Errorf("socks5: read auth status: %w", err)
		}
		if !ok {
			return &chain.HopAuthError{Msg: "socks5: username/password rejected"}
		}
	}
	if _, err := conn.Write(MarshalRequest(CmdConnect, target)); err != nil {
		return fmt.Errorf("socks5: send request: %w", err)
	}
	rep, _, err := ReadReply(conn)
	if err != nil {
		return fmt.Errorf("socks5: read reply: %w", err)
	}
	if rep != ReplySucceeded {
		return &chain.RemoteError{Kind: KindOfReply(rep), Msg: "socks5 reply: " + rep.String()}
	}
	return nil
}

// KindOfReply maps a failure reply to a chain.Kind.
func KindOfReply(rep Reply) chain.Kind {
	switch rep {
	case ReplyNotAllowed:
		return chain.KindDenied
	case ReplyNetworkUnreachable:
		return chain.KindNetUnreachable
	case ReplyHostUnreachable:
		return chain.KindHostUnreachable
	case ReplyConnectionRefused:
		return chain.KindRefused
	case ReplyTTLExpired:
		return chain.KindTimeout
	default:
		return chain.KindGeneral
	}
}

// ReplyOfKind maps a chain.Kind to the reply a server sends.
func ReplyOfKind(k chain.Kind) Reply {
	switch k {
	case chain.KindDenied:
		return ReplyNotAllowed
	case chain.KindNetUnreachable:
		return ReplyNetworkUnreachable
	case chain.KindHostUnreachable:
		return ReplyHostUnreachable
	case chain.KindRefused:
		return ReplyConnectionRefused
	case chain.KindTimeout:
		return ReplyTTLExpired
	default:
		return ReplyGeneralFailure
	}
}
