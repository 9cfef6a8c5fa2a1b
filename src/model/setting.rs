//! What the dynamic settings' rows and audit record, one name each from the
//! settings room to SQLite and JSON.

use serde::Serialize;

/// Where a setting's current value came from (RFD 0016's origin label).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Serialize,
    sqlx::Type,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
#[sqlx(rename_all = "kebab-case")]
pub enum Origin {
    Defaults,
    ConfigFile,
    Dynamic,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// What one audited change of a setting did.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Serialize,
    sqlx::Type,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
#[sqlx(rename_all = "snake_case")]
pub enum SettingAction {
    /// Reconciled with the config file at start.
    Start,
    /// Set over a default.
    Create,
    /// Set over a dynamic value (`--force`).
    Force,
    /// Set over a config-file value (`--force --confirm`).
    Confirm,
    /// Back to the default.
    Rm,
}

impl SettingAction {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_keep_rfd_0016s_names() {
        let names: Vec<&str> = [Origin::Defaults, Origin::ConfigFile, Origin::Dynamic]
            .map(Origin::as_str)
            .to_vec();
        assert_eq!(names, ["defaults", "config-file", "dynamic"]);
        assert_eq!("config-file".parse(), Ok(Origin::ConfigFile));
    }
}
