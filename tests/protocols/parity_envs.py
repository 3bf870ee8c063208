"""The same two games as an openenv-core server (`create_app` over an `Environment` subclass) and as
studio packages, for the wire-parity tests: a small connect-three on a 4x4 board (typed action,
observation and state) and an echo environment whose tools are served over MCP.

The game rules are one source text: the studio package's env.py includes it, and the reference
environments run the same text, so both servers answer the same moves with the same boards."""
import textwrap

from fastmcp import FastMCP
from openenv.core import EnvClient
from openenv.core.client_types import StepResult
from openenv.core.env_server import Action, Environment, MCPEnvironment, Observation, State
from pydantic import Field

GAME = textwrap.dedent('''
    COLUMNS, ROWS, LINE = 4, 4, 3


    def empty_board():
        return [[0] * COLUMNS for _ in range(ROWS)]


    def legal_moves(board):
        return [column for column in range(COLUMNS) if board[0][column] == 0]


    def drop(board, column, player):
        for row in range(ROWS - 1, -1, -1):
            if board[row][column] == 0:
                board[row][column] = player
                return
        raise ValueError(f"column {column} is full")


    def winner(board):
        for row in range(ROWS):
            for column in range(COLUMNS):
                player = board[row][column]
                if not player:
                    continue
                for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                    cells = [(row + dr * k, column + dc * k) for k in range(LINE)]
                    if all(0 <= r < ROWS and 0 <= c < COLUMNS and board[r][c] == player for r, c in cells):
                        return player
        return 0


    class Game:
        """The agent is player 1; player 2 answers in the leftmost open column."""

        def __init__(self):
            self.board, self.current_player, self.moves, self.won_by = empty_board(), 1, 0, 0

        def play(self, column):
            """(reward, done, message) of the agent's move and the answer."""
            if column not in legal_moves(self.board):
                raise ValueError(f"column {column} is full")
            drop(self.board, column, 1)
            self.moves += 1
            self.won_by = winner(self.board)
            if not self.won_by and legal_moves(self.board):
                drop(self.board, legal_moves(self.board)[0], 2)
                self.won_by = winner(self.board)
            done = bool(self.won_by) or not legal_moves(self.board)
            reward = {1: 1.0, 2: -1.0}.get(self.won_by, 0.0)
            return reward, done, f"you played column {column}"

        def observation(self, message):
            return {"board": [row[:] for row in self.board], "current_player": self.current_player,
                    "legal_moves": legal_moves(self.board), "message": message}

        def state(self):
            return {"board": [row[:] for row in self.board], "current_player": self.current_player,
                    "moves": self.moves, "winner": self.won_by}
''')

_rules: dict = {}
exec(compile(GAME, "connect3-game", "exec"), _rules)  # noqa: S102 - our own source text, shared with the package
Game, COLUMNS = _rules["Game"], _rules["COLUMNS"]

# -- the studio packages ---------------------------------------------------------------------------

CONNECT3_ENV_PY = GAME + textwrap.dedent('''

    from studio_sdk import Environment


    class Connect3(Environment):
        action_schema = {"type": "object", "properties": {"column": {"type": "integer", "minimum": 0, "maximum": COLUMNS - 1}},
                         "required": ["column"], "additionalProperties": False}

        def reset(self, task, seed):
            self.game = Game()
            return self.game.observation("your move")

        def step(self, action):
            reward, done, message = self.game.play(action["column"])
            return self.game.observation(message), reward, done, False, {"moves": self.game.moves}

        def state(self):
            return self.game.state()
''')

ECHO_ENV_PY = textwrap.dedent('''
    from studio_sdk import Environment, tool


    class Echo(Environment):
        tools = [tool("echo", "Say a message back", {"type": "object", "properties": {"message": {"type": "string"}},
                                                     "required": ["message"]})]

        def reset(self, task, seed):
            self.said = []
            return {"echoed": "", "count": 0}

        def step(self, action):
            message = action["arguments"]["message"]
            self.said.append(message)
            return {"echoed": message, "count": len(self.said)}, float(len(message)), message == "bye", False, {}

        def state(self):
            return {"said": list(self.said)}
''')

# -- the reference environments (openenv-core) -------------------------------------------------------


class Connect3Action(Action):
    column: int = Field(ge=0, le=COLUMNS - 1)


class Connect3Observation(Observation):
    board: list[list[int]]
    current_player: int
    legal_moves: list[int]
    message: str


class Connect3State(State):
    board: list[list[int]] = Field(default_factory=lambda: Game().board)
    current_player: int = 1
    moves: int = 0
    winner: int = 0


class Connect3Environment(Environment):
    """HTTP steps of openenv-core are stateless (a fresh instance a call): an episode id given to
    reset and step finds its game again, so the reference keeps an HTTP episode as the studio does."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    http_games: dict = {}

    def __init__(self):
        super().__init__()
        self.game, self.episode_id, self.steps = None, None, 0

    def reset(self, seed=None, episode_id=None, **kwargs):
        self.game, self.episode_id, self.steps = Game(), episode_id, 0
        if episode_id:
            self.http_games[episode_id] = self
        return Connect3Observation(**self.game.observation("your move"), reward=0.0, done=False)

    def step(self, action, timeout_s=None, episode_id=None, **kwargs):
        if episode_id and episode_id in self.http_games:
            held = self.http_games[episode_id]
            self.game, self.episode_id, self.steps = held.game, held.episode_id, held.steps
        if self.game is None:
            raise RuntimeError("reset the environment first")
        reward, done, message = self.game.play(action.column)
        self.steps += 1
        if episode_id and episode_id in self.http_games:
            self.http_games[episode_id].steps = self.steps
        return Connect3Observation(**self.game.observation(message), reward=reward, done=done)

    @property
    def state(self):
        fields = self.game.state() if self.game is not None else {}
        return Connect3State(episode_id=self.episode_id, step_count=self.steps, **fields)


class EchoObservation(Observation):
    echoed: str = ""
    count: int = 0


class EchoEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        server = FastMCP("echo")
        self.said: list[str] = []

        @server.tool
        def echo(message: str) -> dict:
            """Say a message back"""
            self.said.append(message)
            return {"echoed": message, "count": len(self.said)}

        super().__init__(server)
        self.steps = 0

    def reset(self, seed=None, episode_id=None, **kwargs):
        self.said, self.steps = [], 0
        return EchoObservation(reward=0.0, done=False)

    def _step_impl(self, action, timeout_s=None, **kwargs):
        raise ValueError(f"unknown action {type(action).__name__}")

    @property
    def state(self):
        return State(step_count=self.steps, said=list(self.said))


# -- a typed client, written as a user of openenv-core would -----------------------------------------


class Connect3Client(EnvClient[Connect3Action, Connect3Observation, Connect3State]):
    def _step_payload(self, action: Connect3Action) -> dict:
        return {"column": action.column}

    def _parse_result(self, payload: dict) -> StepResult[Connect3Observation]:
        observation = Connect3Observation(**payload["observation"], reward=payload.get("reward"), done=payload.get("done", False))
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict) -> Connect3State:
        return Connect3State(**payload)
