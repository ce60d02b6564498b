//go:build !linux

package resp

import "errors"

// eventLoop is Linux only (loop_linux.go); elsewhere Config.EventLoop is
// refused by New.
type eventLoop struct{}

func (s *Server) startLoops() error {
	return errors.New("resp: EventLoop needs Linux (epoll)")
}

func (l *eventLoop) stop()               {}
func (l *eventLoop) register(*conn) bool { return false }

func (s *Server) loopFor(*conn) *eventLoop { return nil }
