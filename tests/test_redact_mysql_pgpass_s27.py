"""MySQL/MariaDB's `-pPASSWORD` (no space) and `.pgpass` lines are hidden; other tools' `-p` stays (walkthrough,
session 27: `mysql -u root -pS3cr3t-Passw0rd! -h db` was bundled in clear)."""

from __future__ import annotations

import pytest

from oomdoctor.collectors.bundle_write import BundleWriter, add_log
from oomdoctor.redact import MASK, redact_text

PW = "S3cr3t-Passw0rd!"


@pytest.mark.parametrize("line,shown", [
    (f"mysql -u root -p{PW} -h db", "mysql -u root -p*** -h db"),
    (f"mysqldump -uroot -p{PW} --all-databases > all.sql", "mysqldump -uroot -p*** --all-databases > all.sql"),
    (f"mariadb -h db -p{PW} train", "mariadb -h db -p*** train"),
    (f"mysqladmin -p{PW} status; ls -p", "mysqladmin -p*** status; ls -p"),
    (f"mysql -u root -p'{PW} x' -h db", "mysql -u root -p'***' -h db"),
    (f'/usr/bin/mysql -p"{PW}" db', '/usr/bin/mysql -p"***" db'),
    (f"CalledProcessError: Command '['mysql', '-u', 'root', '-p{PW}']'",
     "CalledProcessError: Command '['mysql', '-u', 'root', '-p***']'"),
])
def test_a_mysql_password_glued_to_p_is_hidden(line, shown):
    assert redact_text(line) == shown


@pytest.mark.parametrize("line", [
    "mysql -u root -p mydb",  # `-p` alone prompts; the next word is the database
    "python -pS3 train.py", "mkdir -p /data/ckpt", "ssh -p 22 node1", "docker run -p 8080:80 img",
    "pip install -pfoo", "scp -P 2222 a b", "mysql -P 3306 -h db", "mysql.connector.connect(host='db')",
    "tar -pxf a.tar", "python -m mysqlx -pfoo",
])
def test_other_p_flags_stay(line):
    assert redact_text(line) == line


def test_pgpass_lines_are_hidden_where_the_text_names_the_file():
    text = "$ cat ~/.pgpass\nlocalhost:5432:*:postgres:S3cr3tPg\n*:*:train:bob:p\\:ss\nCUDA out of memory\n"
    out = redact_text(text)
    assert out == f"$ cat ~/.pgpass\nlocalhost:5432:*:postgres:{MASK}\n*:*:train:bob:{MASK}\nCUDA out of memory\n"
    plain = "localhost:5432:*:postgres:notasecret\n"  # no .pgpass named: a host:port line of something else
    assert redact_text(plain) == plain


def test_the_walkthrough_log_is_bundled_without_the_password(tmp_path):
    log = tmp_path / "secrets2.log"
    log.write_text(f"mysql -u root -p{PW} -h db\npassword={PW} user=admin\n")
    w = BundleWriter()
    add_log(w, str(log))
    out = w.files["logs/secrets2.log"].decode()
    assert PW not in out and "mysql -u root -p" in out and "-h db" in out
