"""mbpo.errors: a user's mistake met in a collector process or Ray actor reaches the trainer with its message, its
type where the type says what to do (an env fault), and where it was raised, also through pickle (Ray's transport).
"""

from __future__ import annotations

import pickle

import pytest

from mbpo.errors import EnvFaultError, MbpoError, RemoteMbpoError, remote_mbpo_error
from mbpo.runtime.env_builder import EnvContractError
from mbpo.runtime.nonfinite import NonFiniteEnvError


@pytest.mark.parametrize("type_name, kind", [("EnvContractError", EnvContractError),
                                             ("NonFiniteEnvError", NonFiniteEnvError),
                                             ("ConfigError", RemoteMbpoError), ("AnyOtherError", RemoteMbpoError)])
def test_a_remote_error_keeps_its_message_kind_and_where_also_through_pickle(type_name: str, kind: type) -> None:
    error = remote_mbpo_error(type_name, "env.factory='x': what was wrong; expected this", "collector 1 (pid 7)")
    for e in (error, pickle.loads(pickle.dumps(error))):
        assert type(e) is kind and isinstance(e, MbpoError)
        assert str(e) == "env.factory='x': what was wrong; expected this" and e.detail == "collector 1 (pid 7)"
    assert isinstance(error, EnvFaultError) == (kind is not RemoteMbpoError)
