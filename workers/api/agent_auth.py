"""Node agents authenticate with their node token; user tokens are refused here and vice versa."""

from __future__ import annotations

from rest_framework import authentication, exceptions
from rest_framework.permissions import BasePermission

from fleet.models import Node
from kernel.protocol import NODE_TOKEN_PREFIX
from workers.services.enrollment import authenticate_node


class NodePrincipal:
    """Stands in for request.user on agent endpoints."""

    is_authenticated = True
    is_active = True
    is_staff = False

    def __init__(self, node: Node):
        self.node = node

    def __str__(self) -> str:
        return f"node {self.node.hostname}"


class NodeTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0].lower() != "bearer":
            return None
        if len(header) != 2 or not header[1].startswith(NODE_TOKEN_PREFIX):
            raise exceptions.AuthenticationFailed("Agent endpoints need a node token.")
        node = authenticate_node(header[1])
        if node is None:
            raise exceptions.AuthenticationFailed("Invalid node token (enroll again).")
        return NodePrincipal(node), node

    def authenticate_header(self, request) -> str:
        return self.keyword


class IsNode(BasePermission):
    def has_permission(self, request, view) -> bool:
        return isinstance(request.user, NodePrincipal)
